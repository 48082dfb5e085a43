/* The body of libsame_base_a.so and libsame_base_b.so: one function, KEEP_FN(n), that returns
 * malloc(n) from a stack frame of FRAME_BYTES bytes. Written in assembly so that both libraries
 * have exactly the same layout (the function and its call to malloc at the same offsets, names
 * of the same length) while their frames differ in size: the unwind rule at the return address
 * of the call is then different in each, at the same address once one replaces the other. */
#define YSTR2(x) #x
#define YSTR(x) YSTR2(x)
__asm__(".text\n"
        ".globl " YSTR(KEEP_FN) "\n"
        ".type " YSTR(KEEP_FN) ", @function\n"
        ".p2align 4\n" YSTR(KEEP_FN) ":\n"
        ".cfi_startproc\n"
        "subq $" YSTR(FRAME_BYTES) ", %rsp\n"
        ".cfi_def_cfa_offset " YSTR(CFA_OFFSET) "\n"
        "call malloc@PLT\n"
        "addq $" YSTR(FRAME_BYTES) ", %rsp\n"
        ".cfi_def_cfa_offset 8\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size " YSTR(KEEP_FN) ", .-" YSTR(KEEP_FN) "\n");
