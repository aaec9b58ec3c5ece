/* Chapter 10 exercise: your own coroutine scheduler for the replicas.
 *
 * md_cuda_sched_run (md_cuda.cu.h, section sched) does it for you; here you write the loop
 * yourself, with md.h's coroutines and the CUDA runtime only:
 *
 *   1. one md_co per replica (md_co_create), each running a function that, for every exchange
 *      round, enqueues the round's steps on its replica's stream (md_cuda_sim_enqueue with
 *      MD_CUDA_SIM_ENERGY), records a cudaEvent_t on that stream and calls md_co_yield until the
 *      scheduler says the event has completed, then reads its energy (md_cuda_sim_poll: the event
 *      has completed, so it does not wait) and yields at the "barrier";
 *   2. the scheduler: while some coroutine is alive, poll each waiting replica's event with
 *      cudaEventQuery and resume the ready ones (md_co_resume); when every replica is at the
 *      barrier, call md_remd_exchange and rescale nothing (this exercise keeps temperatures);
 *   3. count the resumes per replica and print them: no replica may fall behind.
 *
 * Check: the energies your run logs must equal, bit for bit, those of md_cuda_remd_run with
 * the same replicas (main.cu --exercise prints "exercise: OK" when they do), and your steps/s
 * should approach the "coroutines" rung's.
 *
 * Until you write it, exercise_run calls the library's scheduler (the solution), so the
 * program runs. Replace the body below. */

static md_status exercise_run(const md_system *sys, const md_topology *top, const md_lj_table *lj, const md_sim_desc *base,
                              const double *temps, int n, md_cuda_remd_desc *d, md_cuda_remd_stats *stats) {
    md_cuda_remd x;
    md_status st;
    /* TODO: your scheduler here (see above). The solution: */
    if ((st = md_cuda_remd_create(&x, n, sys, top, lj, base, temps, 2024, NULL)) != MD_OK) return st;
    d->mode = MD_CUDA_SCHED_COROUTINES;
    st = md_cuda_remd_run(&x, d, stats);
    if (st == MD_OK) printf("    exercise: OK (the library's scheduler: replace exercise_run with yours)\n");
    md_cuda_remd_destroy(&x);
    return st;
}
