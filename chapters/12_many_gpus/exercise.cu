/* chapters/12_many_gpus/exercise.cu - your scheduler, run by main.cu as "exercise" (2 workers).
 *
 * It starts as the plainest split: a STATIC round robin. Worker w (one std::thread each, its
 * device made current) computes tiles w, w + N, w + 2N, ... with the library's tile function
 * md_cuda_dcs_tiles_tile, and the first failure ends everything. Your task (README.md):
 *   a. make it dynamic: the workers pull the next tile from one std::atomic<int> counter; make
 *      one worker slow (sleep 5 ms in its tiles) and compare the two schedules' times;
 *   b. add the retry rule of md_cuda.cu.h's section tiles: a failed tile goes back to a queue and
 *      is retried on another worker; a worker that fails twice takes no more tiles; inject
 *      failures (return an error from some calls) and check that every tile is written once;
 *   c. compare with md_cuda_tiles_run (the rows 2_workers, 4_workers) and read its code.
 * Contract: compute every tile of j exactly once; fill stats->ndevices and stats->tiles_of (the
 * table prints them); return MD_OK, or the md_status of a failure. */
#include "md_cuda.cu.h"
#include <string>
#include <thread>
#include <vector>

static md_status exercise_run(md_cuda_dcs_tiles *j, md_cuda_tiles_stats *stats) {
    std::vector<std::thread> threads;
    std::vector<md_status> status((size_t)j->nworkers, MD_OK);
    std::vector<std::string> why((size_t)j->nworkers);
    int w, v;
    memset(stats, 0, sizeof *stats);
    stats->ntiles = j->ntiles;
    stats->nworkers = j->nworkers;
    for (w = 0; w < j->nworkers; w++) {
        threads.emplace_back([j, w, stats, &status, &why]() {
            const cudaError_t e = cudaSetDevice(j->devices[w]);
            int t;
            if (e != cudaSuccess) {
                status[w] = md_cuda_error(e, "cudaSetDevice", __FILE__, __LINE__);
                why[w] = md_last_error();
                return;
            }
            for (t = w; t < j->ntiles; t += j->nworkers) { /* static: tile t belongs to worker t mod N */
                if ((status[w] = md_cuda_dcs_tiles_tile(w, j->devices[w], t, j)) != MD_OK) {
                    why[w] = md_last_error();
                    return;
                }
                stats->tiles_of[w]++;
            }
        });
    }
    for (auto &th : threads) th.join();
    for (w = 0; w < j->nworkers; w++) {
        for (v = 0; v < w && j->devices[v] != j->devices[w]; v++) {
        }
        if (v == w) stats->ndevices++;
        if (status[w] != MD_OK) /* the worker's message, set again on this thread */
            return md_set_error(status[w], "exercise_run", 0, "worker", "worker %d: %s", w, why[w].c_str());
    }
    stats->completed = j->ntiles;
    return MD_OK;
}
