/* split_tu_md.c - md.h's implementation compiled on its own, as C11, for tests/gpu_split_tu.cu:
 * the file a user's project keeps md.h's implementation in when md_cuda.cu.h's lives in a .cu
 * file of its own. Nothing else is here. */
#define MD_IMPLEMENTATION
#include "md.h"
