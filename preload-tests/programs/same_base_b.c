/* Library B of dlclose_same_base.c: b_keep(n) returns malloc(n) from a 136-byte frame. */
#define KEEP_FN b_keep
#define FRAME_BYTES 136
#define CFA_OFFSET 144
#include "same_base_lib.h"
