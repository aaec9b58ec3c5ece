/* libFuzzer target for the multi-frame XYZ reader: the input is written to a
 * temporary file, opened with md_xyz_open and read with md_xyz_next until the
 * end, an error, or 64 frames. This covers the file-backed line reader that
 * md_read_xyz_mem (fuzz_xyz) does not reach. Any crash, leak or sanitizer
 * report is a bug; error returns are expected.
 *   make fuzz && build/fuzz/fuzz_xyz_frames tests/fuzz/corpus/xyz_frames */
#define _POSIX_C_SOURCE 200809L /* getpid */
#define MD_IMPLEMENTATION
#include "md.h"
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    md_xyz_reader r;
    md_system frame;
    FILE *f;
    int got = 1, k;
    if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz_xyz_frames.%ld.xyz", (long)getpid());
    if (!(f = fopen(path, "wb"))) return 0;
    if (size && fwrite(data, 1, size, f) != size) {
        fclose(f);
        return 0;
    }
    if (fclose(f) != 0) return 0;
    memset(&frame, 0, sizeof frame);
    if (md_xyz_open(&r, path) == MD_OK) {
        for (k = 0; k < 64 && got; k++)
            if (md_xyz_next(&r, &frame, &got) != MD_OK) break;
        md_xyz_close(&r);
    }
    md_system_free(&frame);
    remove(path);
    return 0;
}
