/* Library A of dlclose_same_base.c: a_keep(n) returns malloc(n) from a 4104-byte frame. */
#define KEEP_FN a_keep
#define FRAME_BYTES 4104
#define CFA_OFFSET 4112
#include "same_base_lib.h"
