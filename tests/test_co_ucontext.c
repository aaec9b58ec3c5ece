/* tests/test_co.c with md.h's ucontext context switch (MD_CO_UCONTEXT) instead of the
 * inline assembly, so both switches are tested on machines that have both. */
#define MD_CO_UCONTEXT
#include "test_co.c"
