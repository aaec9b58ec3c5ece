/* Chapter 01 exercise: make the sequential Coulomb potential map fast.
 *
 * exercise_dcs() computes the same map as md.h's md_dcs_simple(): for every
 * grid point, V = MD_COULOMB * sum over atoms of q / r, skipping an atom closer
 * than sqrt(MD_DCS_MIN_R2) to the point. As given it is correct but slow: the
 * plain output-oriented loop, in float, that recomputes the whole distance
 * (3 subtractions, 3 multiplies, 2 adds) for every atom at every point.
 *
 * Your job: keep it correct (main.c checks it against md_dcs_simple) and make
 * it faster by hoisting what does not change in the inner loop. Follow the
 * TODOs. Build and run:
 *     make build/chapters/01_sequential_coulomb && build/chapters/01_sequential_coulomb
 * The row "exercise" of the table is this function. The solution is md.h's
 * md_dcs_rows(), but try it yourself first. */

static md_status exercise_dcs(const md_float4 *xyzq, int n, md_grid *grid) {
    int i, j, k, a;
    if (!xyzq || n < 1 || !grid || !grid->data || grid->n[0] < 1 || grid->n[1] < 1 || grid->n[2] < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "exercise_dcs", 0, NULL, "bad argument");

    /* TODO 1: loop order. Here every point walks over all n atoms: the atoms
     * (16 bytes each) stream through the cache once per point. Swap the loops
     * so that, for one plane k (nx * ny floats, which fit in L1/L2), every atom
     * adds its contribution to the whole plane. Zero the plane first and
     * multiply by MD_COULOMB at the end. */
    for (k = 0; k < grid->n[2]; k++) {
        const float z = (float)(grid->origin[2] + k * grid->spacing[2]);
        for (j = 0; j < grid->n[1]; j++) {
            const float y = (float)(grid->origin[1] + j * grid->spacing[1]);
            for (i = 0; i < grid->n[0]; i++) {
                const float x = (float)(grid->origin[0] + i * grid->spacing[0]);
                float v = 0.0f;
                for (a = 0; a < n; a++) {
                    /* TODO 2: dz * dz is the same for every point of plane k:
                     * with atoms outside the point loops, compute it once per
                     * atom per plane. */
                    /* TODO 3: dy * dy + dz * dz is the same for a whole row j:
                     * compute it once per atom per row, so the innermost loop
                     * is dx = x_i - ax; r2 = dx * dx + dydz2; one sqrt, one divide. */
                    const float dx = x - xyzq[a].x, dy = y - xyzq[a].y, dz = z - xyzq[a].z;
                    const float r2 = dx * dx + dy * dy + dz * dz;
                    if (r2 >= MD_DCS_MIN_R2) v += xyzq[a].w / sqrtf(r2);
                }
                grid->data[((size_t)k * grid->n[1] + j) * grid->n[0] + i] = (float)MD_COULOMB * v;
            }
        }
    }
    /* TODO 4 (optional): share the planes among threads with
     * `#pragma omp parallel for` on the k loop (each plane is independent), and
     * compare your time with the cpu_rows_omp row. */
    return MD_OK;
}
