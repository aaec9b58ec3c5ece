/* Tests of md_cuda.cu.h's section graph (chapter 09): the comparator registry, the graph walk,
 * md_cuda_graph_compare on graphs that differ in exactly one thing, the cached executable graph,
 * explicit kernel nodes whose arguments are set per launch, and IF and WHILE conditional nodes.
 *
 * Every graph result is checked bitwise against the same work launched on a stream, and against
 * a host reference computed with the same float operations (the kernels round each operation
 * explicitly, __fmul_rn, __fadd_rn, and the host pass is built with -ffp-contract=off), so
 * "bitwise" means bitwise: tolerance 0.
 *
 * The toy step of the loop tests is a random walk with a neighbour-list-like rebuild: each step
 * moves every coordinate by amp * u, u in [-1, 1) from an integer hash of (step, atom), then a
 * rebuild copies x into xref when some |x - xref| exceeds a limit (decided on the device: a
 * stream version gates the rebuild kernel on a device word, the graph version puts it in an IF
 * node). Seeds: the hash constants below; initial positions from md_rng seed 909.
 *
 * Host-only tests (rules parsing, names, arguments) run without a GPU; the rest SKIP.
 * MD_SANITIZE=1 shrinks atom and step counts. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "md_test.h"
#include <stddef.h>

static int sanitize;

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!md_cuda_available()) MD_SKIP("%s", md_last_error());                                 \
    } while (0)

/* ---- the probe kernels: one argument of each kind ---- */

/* A struct argument with no padding (6 floats, 2 ints), so its bytes are its fields. */
typedef struct probe_box {
    float lo[3];
    float hi[3];
    int n;
    int tag;
} probe_box;

/* out[i] = scale i + lo[0] + hi[2] n, each operation rounded once (the host computes the same). */
__global__ void probe_kernel(float *out, int n, float scale, probe_box box) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __fadd_rn(__fadd_rn(__fmul_rn(scale, (float)i), box.lo[0]), __fmul_rn(box.hi[2], (float)box.n));
}

/* The same signature and body, never registered: compared bytewise. */
__global__ void probe_twin_kernel(float *out, int n, float scale, probe_box box) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __fadd_rn(__fadd_rn(__fmul_rn(scale, (float)i), box.lo[0]), __fmul_rn(box.hi[2], (float)box.n));
}

/* Another member of probe_kernel's family (same parameters, another result): out[i] = scale i - lo[0]. */
__global__ void probe_alt_kernel(float *out, int n, float scale, probe_box box) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __fsub_rn(__fmul_rn(scale, (float)i), box.lo[0]);
}

/* A kernel with an argument its result does not depend on (tag), registered IGNORE. */
__global__ void probe_ignore_kernel(float *out, int n, int tag) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    (void)tag;
    if (i < n) out[i] = (float)(3 * i + 1);
}

/* Registered with three letters for its two parameters: md_cuda_graph_rules must refuse it. */
__global__ void probe_mismatch_kernel(int *a, int b) {
    if (threadIdx.x == 0) a[0] = b;
}

static float probe_value(int i, float scale, const probe_box *b) {
    const float a = scale * (float)i;
    const float c = a + b->lo[0];
    return c + b->hi[2] * (float)b->n;
}

static float probe_alt_value(int i, float scale, const probe_box *b) {
    const float a = scale * (float)i;
    return a - b->lo[0];
}

static md_status probe_register(void) {
    static const char *const rules = "DMDM"; /* pointer may differ, size must match, scalar may differ, struct must match */
    md_status st;
    if ((st = md_cuda_graph_register((const void *)probe_kernel, rules, MD_CUDA_PARAM_MUST_MATCH)) != MD_OK ||
        (st = md_cuda_graph_register((const void *)probe_alt_kernel, rules, MD_CUDA_PARAM_MUST_MATCH)) != MD_OK ||
        (st = md_cuda_graph_family((const void *)probe_kernel, "probe")) != MD_OK ||
        (st = md_cuda_graph_family((const void *)probe_alt_kernel, "probe")) != MD_OK ||
        (st = md_cuda_graph_family((const void *)probe_ignore_kernel, "probe")) != MD_OK) /* another layout */
        return st;
    return md_cuda_graph_register((const void *)probe_ignore_kernel, "DMI", MD_CUDA_PARAM_MAY_DIFFER);
}

/* What one probe capture enqueues: a memset of a side buffer, then the probe (or its twin, or
 * the ignore kernel), optionally a second probe (one node more). */
typedef struct probe_args {
    float *out;
    int n;
    float scale;
    probe_box box;
    int grid;
    int which;      /* 0: probe_kernel, 1: probe_twin_kernel, 2: probe_ignore_kernel, 3: probe_alt_kernel */
    int extra;      /* 1: a second probe_kernel node after the first */
    int *side;      /* memset destination */
    int side_count; /* ints set */
    int side_value; /* byte value */
} probe_args;

static md_status probe_enqueue(void *ctx, cudaStream_t s) {
    const probe_args *a = (const probe_args *)ctx;
    MD_CUDA_TRY(cudaMemsetAsync(a->side, a->side_value, (size_t)a->side_count * sizeof(int), s));
    if (a->which == 0) MD_CUDA_LAUNCH(probe_kernel, a->grid, 128, 0, s, a->out, a->n, a->scale, a->box);
    else if (a->which == 1) MD_CUDA_LAUNCH(probe_twin_kernel, a->grid, 128, 0, s, a->out, a->n, a->scale, a->box);
    else if (a->which == 3) MD_CUDA_LAUNCH(probe_alt_kernel, a->grid, 128, 0, s, a->out, a->n, a->scale, a->box);
    else MD_CUDA_LAUNCH(probe_ignore_kernel, a->grid, 128, 0, s, a->out, a->n, a->box.tag);
    if (a->extra) MD_CUDA_LAUNCH(probe_kernel, a->grid, 128, 0, s, a->out, a->n, a->scale, a->box);
    return MD_OK;
}

typedef struct probe_fixture {
    cudaStream_t s;
    float *d_out[2];
    int *d_side[2];
    float *h_out;
    int cap;
} probe_fixture;

static md_status probe_fixture_make(probe_fixture *f, int cap) {
    md_status st;
    memset(f, 0, sizeof *f);
    f->cap = cap;
    MD_CUDA_TRY(cudaStreamCreateWithFlags(&f->s, cudaStreamNonBlocking));
    if ((st = md_cuda_alloc((void **)&f->d_out[0], (size_t)cap, sizeof(float), "out0")) != MD_OK ||
        (st = md_cuda_alloc((void **)&f->d_out[1], (size_t)cap, sizeof(float), "out1")) != MD_OK ||
        (st = md_cuda_alloc((void **)&f->d_side[0], 64, sizeof(int), "side0")) != MD_OK ||
        (st = md_cuda_alloc((void **)&f->d_side[1], 64, sizeof(int), "side1")) != MD_OK)
        return st;
    if (!(f->h_out = (float *)md_alloc_array((size_t)cap, sizeof(float)))) return MD_ERR_OUT_OF_MEMORY;
    return MD_OK;
}

static void probe_fixture_free(probe_fixture *f) {
    if (f->s) {
        (void)cudaStreamSynchronize(f->s);
        (void)cudaStreamDestroy(f->s);
    }
    md_cuda_free(f->d_out[0]);
    md_cuda_free(f->d_out[1]);
    md_cuda_free(f->d_side[0]);
    md_cuda_free(f->d_side[1]);
    md_free(f->h_out);
    memset(f, 0, sizeof *f);
}

static void probe_base(probe_args *a, const probe_fixture *f) {
    memset(a, 0, sizeof *a);
    a->out = f->d_out[0];
    a->n = 1000;
    a->scale = 0.37f;
    a->box.lo[0] = 1.25f;
    a->box.lo[1] = -2.5f;
    a->box.lo[2] = 0.5f;
    a->box.hi[0] = 3.0f;
    a->box.hi[1] = 4.5f;
    a->box.hi[2] = 0.0625f;
    a->box.n = 17;
    a->box.tag = 5;
    a->grid = (a->n + 127) / 128;
    a->side = f->d_side[0];
    a->side_count = 64;
    a->side_value = 0x11;
}

/* Poison d_out, launch the cache's graph and check the first a->n floats against the host
 * reference of a's arguments (tolerance 0: the same rounded operations). Returns the number of
 * mismatches, or -1 on a CUDA failure. */
static long probe_check_launch(probe_fixture *f, md_cuda_graph_cache *c, const probe_args *a) {
    long bad = 0;
    int i;
    if (md_cuda_poison(a->out, (size_t)a->n, f->s) != MD_OK || md_cuda_graph_cache_launch(c, f->s) != MD_OK ||
        cudaMemcpyAsync(f->h_out, a->out, (size_t)a->n * sizeof(float), cudaMemcpyDeviceToHost, f->s) != cudaSuccess ||
        cudaStreamSynchronize(f->s) != cudaSuccess)
        return -1;
    for (i = 0; i < a->n; i++) {
        const float want = a->which == 2   ? (float)(3 * i + 1)
                           : a->which == 3 ? probe_alt_value(i, a->scale, &a->box)
                                           : probe_value(i, a->scale, &a->box);
        if (memcmp(&f->h_out[i], &want, sizeof want) != 0) bad++;
    }
    return bad;
}

/* ---- registry ---- */

/* Rule strings are parsed letter by letter: bad letters, NULLs, too many letters and a second
 * registration with other rules fail naming the field; the same rules again succeed; a kernel
 * belongs to one family at most. Host only (registration makes no CUDA call). */
static void register_parses_and_refuses(void) {
    char many[MD_CUDA_GRAPH_MAX_PARAMS + 2];
    MD_CHECK_ERROR(md_cuda_graph_register(NULL, "D", MD_CUDA_PARAM_MUST_MATCH), MD_ERR_INVALID_ARGUMENT, "func");
    MD_CHECK_ERROR(md_cuda_graph_register((const void *)probe_mismatch_kernel, NULL, MD_CUDA_PARAM_MUST_MATCH),
                   MD_ERR_INVALID_ARGUMENT, "rules");
    MD_CHECK_ERROR(md_cuda_graph_register((const void *)probe_mismatch_kernel, "DX", MD_CUDA_PARAM_MUST_MATCH),
                   MD_ERR_INVALID_ARGUMENT, "letter 2");
    MD_CHECK_ERROR(md_cuda_graph_register((const void *)probe_mismatch_kernel, "dm", MD_CUDA_PARAM_MUST_MATCH),
                   MD_ERR_INVALID_ARGUMENT, "letter 1");
    MD_CHECK_ERROR(md_cuda_graph_register((const void *)probe_mismatch_kernel, "DD", (md_cuda_param_rule)7),
                   MD_ERR_INVALID_ARGUMENT, "launch");
    memset(many, 'D', sizeof many - 1);
    many[sizeof many - 1] = '\0';
    MD_CHECK_ERROR(md_cuda_graph_register((const void *)probe_mismatch_kernel, many, MD_CUDA_PARAM_MUST_MATCH),
                   MD_ERR_INVALID_ARGUMENT, "more than");
    MD_CHECK_OK(md_cuda_graph_register((const void *)probe_mismatch_kernel, "DDD", MD_CUDA_PARAM_MUST_MATCH));
    MD_CHECK_OK(md_cuda_graph_register((const void *)probe_mismatch_kernel, "DDD", MD_CUDA_PARAM_MUST_MATCH));
    MD_CHECK_ERROR(md_cuda_graph_register((const void *)probe_mismatch_kernel, "DDM", MD_CUDA_PARAM_MUST_MATCH),
                   MD_ERR_INVALID_ARGUMENT, "already registered");
    MD_CHECK_ERROR(md_cuda_graph_register((const void *)probe_mismatch_kernel, "DDD", MD_CUDA_PARAM_MAY_DIFFER),
                   MD_ERR_INVALID_ARGUMENT, "already registered");
    MD_CHECK_ERROR(md_cuda_graph_family(NULL, "f"), MD_ERR_INVALID_ARGUMENT, "func");
    MD_CHECK_ERROR(md_cuda_graph_family((const void *)probe_mismatch_kernel, ""), MD_ERR_INVALID_ARGUMENT, "family");
    MD_CHECK_OK(md_cuda_graph_family((const void *)probe_mismatch_kernel, "mismatch"));
    MD_CHECK_OK(md_cuda_graph_family((const void *)probe_mismatch_kernel, "mismatch"));
    MD_CHECK_ERROR(md_cuda_graph_family((const void *)probe_mismatch_kernel, "other"), MD_ERR_INVALID_ARGUMENT,
                   "already in family mismatch");
    MD_CHECK(strcmp(md_cuda_graph_match_name(MD_CUDA_GRAPH_IDENTICAL), "identical") == 0);
    MD_CHECK(strcmp(md_cuda_graph_match_name(MD_CUDA_GRAPH_UPDATABLE), "updatable") == 0);
    MD_CHECK(strcmp(md_cuda_graph_match_name(MD_CUDA_GRAPH_REINSTANTIATE), "re-instantiate") == 0);
}

/* Host-side argument checks of the section's calls, before any CUDA call. */
static void graph_calls_check_arguments(void) {
    md_cuda_graph_cache c;
    md_cuda_graph_verdict v;
    cudaGraph_t g = NULL;
    cudaGraphNode_t node = NULL;
    cudaGraphConditionalHandle h = 0;
    long long count = 0;
    memset(&c, 0, sizeof c);
    MD_CHECK_ERROR(md_cuda_graph_capture((cudaStream_t)0, probe_enqueue, NULL, &g), MD_ERR_INVALID_ARGUMENT, "legacy");
    MD_CHECK(g == NULL);
    MD_CHECK_ERROR(md_cuda_graph_capture((cudaStream_t)0, NULL, NULL, &g), MD_ERR_INVALID_ARGUMENT, "enqueue");
    MD_CHECK_ERROR(md_cuda_graph_compare(NULL, NULL, &v), MD_ERR_INVALID_ARGUMENT, "is NULL");
    MD_CHECK_ERROR(md_cuda_graph_cache_launch(&c, (cudaStream_t)0), MD_ERR_INVALID_ARGUMENT, "no executable graph");
    c.policy = (md_cuda_graph_policy)9;
    MD_CHECK_ERROR(md_cuda_graph_cache_capture(&c, (cudaStream_t)0, probe_enqueue, NULL), MD_ERR_INVALID_ARGUMENT, "policy");
    MD_CHECK_ERROR(md_cuda_graph_kernel_node((cudaStream_t)0, NULL, "x", dim3(1), dim3(1), 0, NULL, 0, &node),
                   MD_ERR_INVALID_ARGUMENT, "func");
    MD_CHECK_ERROR(md_cuda_graph_kernel_node_set(NULL, NULL, (const void *)probe_kernel, dim3(1), dim3(1), 0, NULL, 0),
                   MD_ERR_INVALID_ARGUMENT, "exec");
    MD_CHECK_ERROR(md_cuda_graph_cond_handle((cudaStream_t)0, 0, 0, &h), MD_ERR_INVALID_ARGUMENT, "legacy");
    MD_CHECK_ERROR(md_cuda_graph_cond_from_word((cudaStream_t)0, h, NULL), MD_ERR_INVALID_ARGUMENT, "d_word");
    MD_CHECK_ERROR(md_cuda_graph_loop((cudaStream_t)0, (cudaStream_t)0, &count, -1, NULL, probe_enqueue, NULL),
                   MD_ERR_INVALID_ARGUMENT, "n");
    MD_CHECK_ERROR(md_cuda_graph_loop((cudaStream_t)0, (cudaStream_t)0, NULL, 3, NULL, probe_enqueue, NULL),
                   MD_ERR_INVALID_ARGUMENT, "d_count");
    MD_CHECK_ERROR(md_cuda_graph_walk(NULL, NULL, NULL), MD_ERR_INVALID_ARGUMENT, "graph");
    MD_CHECK_ERROR(md_cuda_graph_run_if((cudaStream_t)0, (cudaStream_t)0, NULL, probe_enqueue, NULL), MD_ERR_INVALID_ARGUMENT,
                   "d_word");
    MD_CHECK_ERROR(md_cuda_graph_run_if((cudaStream_t)0, (cudaStream_t)0, &count, NULL, NULL), MD_ERR_INVALID_ARGUMENT, "body");
    MD_CHECK_ERROR(md_cuda_graph_kernel_diff(NULL, NULL, NULL, NULL, 0, NULL), MD_ERR_INVALID_ARGUMENT, "is NULL");
    MD_CHECK_ERROR(md_cuda_graph_exec_set_kernels(NULL, NULL, NULL, 0), MD_ERR_INVALID_ARGUMENT, "exec");
    md_cuda_graph_cache_destroy(&c);
    MD_CHECK(c.exec == NULL && c.policy == MD_CUDA_GRAPH_POLICY_COMPARE);
}

/* The registry's offsets and sizes are cudaFuncGetParamInfo's, and agree with the C++ layout
 * rules worked out here from sizeof and alignof (each parameter at the next multiple of its
 * alignment); unregistered kernels get MUST_MATCH everywhere; a kernel registered with more
 * letters than parameters is refused at lookup, naming both counts. */
static void rules_layout_from_param_info(void) {
    md_cuda_kernel_rules r;
    size_t want_off[4], want_size[4] = {sizeof(float *), sizeof(int), sizeof(float), sizeof(probe_box)};
    const size_t align[4] = {alignof(float *), alignof(int), alignof(float), alignof(probe_box)};
    size_t at = 0;
    int i;
    NEED_GPU();
    for (i = 0; i < 4; i++) {
        at = (at + align[i] - 1) / align[i] * align[i];
        want_off[i] = at;
        at += want_size[i];
    }
    MD_CHECK_OK(probe_register());
    MD_CHECK_OK(md_cuda_graph_rules((const void *)probe_kernel, &r));
    MD_CHECK(r.registered == 1 && r.nparams == 4);
    for (i = 0; i < 4; i++)
        MD_CHECKF(r.offset[i] == want_off[i] && r.size[i] == want_size[i], "parameter %d: offset %zu size %zu, want %zu %zu", i,
                  r.offset[i], r.size[i], want_off[i], want_size[i]);
    MD_CHECK(r.rule[0] == MD_CUDA_PARAM_MAY_DIFFER && r.rule[1] == MD_CUDA_PARAM_MUST_MATCH);
    MD_CHECK(r.rule[2] == MD_CUDA_PARAM_MAY_DIFFER && r.rule[3] == MD_CUDA_PARAM_MUST_MATCH);
    MD_CHECK(r.launch == MD_CUDA_PARAM_MUST_MATCH);
    MD_CHECK_OK(md_cuda_graph_rules((const void *)probe_twin_kernel, &r));
    MD_CHECK(r.registered == 0 && r.nparams == 4 && r.launch == MD_CUDA_PARAM_MUST_MATCH);
    for (i = 0; i < 4; i++) MD_CHECK(r.rule[i] == MD_CUDA_PARAM_MUST_MATCH && r.size[i] == want_size[i]);
    MD_CHECK_OK(md_cuda_graph_rules((const void *)probe_ignore_kernel, &r));
    MD_CHECK(r.nparams == 3 && r.rule[2] == MD_CUDA_PARAM_IGNORE && r.launch == MD_CUDA_PARAM_MAY_DIFFER);
    (void)md_cuda_graph_register((const void *)probe_mismatch_kernel, "DDD", MD_CUDA_PARAM_MUST_MATCH);
    MD_CHECK_ERROR(md_cuda_graph_rules((const void *)probe_mismatch_kernel, &r), MD_ERR_INVALID_ARGUMENT,
                   "has 2 parameters (cudaFuncGetParamInfo) but its registered rules name 3");
    MD_CHECK(cudaGetLastError() == cudaSuccess); /* the probing past the last parameter left no error behind */
}

/* ---- walk ---- */

typedef struct walk_log {
    int nodes, kernels, memsets, children, max_depth;
    int probe_n;         /* the n argument of the probe kernel node, read through args */
    float probe_scale;   /* its scale argument */
    int probe_nparams;
    const char *probe_name;
    unsigned grid;
} walk_log;

static md_status walk_visit(void *ctx, const md_cuda_graph_node *v) {
    walk_log *w = (walk_log *)ctx;
    w->nodes++;
    if (v->depth > w->max_depth) w->max_depth = v->depth;
    if (v->type == cudaGraphNodeTypeMemset) w->memsets++;
    if (v->type == cudaGraphNodeTypeGraph) w->children++;
    if (v->type == cudaGraphNodeTypeKernel) {
        w->kernels++;
        if (v->func == (const void *)probe_kernel && v->args) {
            w->probe_nparams = v->nparams;
            memcpy(&w->probe_n, v->args[1], sizeof(int));
            memcpy(&w->probe_scale, v->args[2], sizeof(float));
            w->probe_name = v->name;
            w->grid = v->grid.x;
        }
    }
    return MD_OK;
}

static md_status walk_stop(void *ctx, const md_cuda_graph_node *v) {
    (void)v;
    return ++*(int *)ctx == 2 ? MD_ERR_RANGE : MD_OK;
}

/* The walk of a captured probe graph sees the memset, then the kernel with its registered name,
 * grid and argument values; a graph holding it as a child graph is walked into (depth 1); a
 * visitor's status stops the walk. */
static void walk_sees_nodes_and_arguments(void) {
    probe_fixture f;
    probe_args a;
    walk_log w;
    cudaGraph_t g = NULL, outer = NULL;
    cudaGraphNode_t child = NULL;
    int calls = 0;
    NEED_GPU();
    MD_CHECK_OK(probe_register());
    MD_CHECK_OK(probe_fixture_make(&f, 4096));
    probe_base(&a, &f);
    MD_CHECK_OK(md_cuda_graph_capture(f.s, probe_enqueue, &a, &g));
    memset(&w, 0, sizeof w);
    MD_CHECK_OK(md_cuda_graph_walk(g, walk_visit, &w));
    MD_CHECKF(w.nodes == 2 && w.kernels == 1 && w.memsets == 1, "nodes %d kernels %d memsets %d", w.nodes, w.kernels, w.memsets);
    MD_CHECK(w.probe_nparams == 4 && w.probe_n == a.n && w.probe_scale == a.scale && w.grid == (unsigned)a.grid);
    MD_CHECK(w.probe_name && strcmp(w.probe_name, "probe_kernel") == 0);
    MD_CHECK(cudaGraphCreate(&outer, 0) == cudaSuccess);
    MD_CHECK(cudaGraphAddChildGraphNode(&child, outer, NULL, 0, g) == cudaSuccess);
    memset(&w, 0, sizeof w);
    MD_CHECK_OK(md_cuda_graph_walk(outer, walk_visit, &w));
    MD_CHECK(w.nodes == 3 && w.children == 1 && w.max_depth == 1 && w.kernels == 1);
    MD_CHECK_ERROR(md_cuda_graph_walk(outer, walk_stop, &calls), MD_ERR_RANGE, "");
    MD_CHECK(calls == 2);
    (void)cudaGraphDestroy(outer);
    (void)cudaGraphDestroy(g);
    probe_fixture_free(&f);
}

/* ---- compare ---- */

typedef struct compare_case {
    const char *what;
    md_cuda_graph_match want;
    int param;          /* the argument the verdict must name (-1: none) */
    const char *reason; /* text the reason must contain */
} compare_case;

/* Capture graph A from the base arguments and, for each case, graph B from arguments that differ
 * in exactly one thing; the verdict, the argument it names and its reason must be the expected
 * ones. Every updatable B is then applied with cudaGraphExecUpdate to an executable of A, which
 * must succeed and then compute B's result (bitwise against the host reference). */
static void compare_one_difference_of_each_kind(void) {
    static const compare_case cases[] = {
        {"identical", MD_CUDA_GRAPH_IDENTICAL, -1, "identical: 2 nodes"},
        {"pointer (may differ)", MD_CUDA_GRAPH_UPDATABLE, 0, "argument 0 (8 bytes at offset 0) differs, may differ"},
        {"size (must match)", MD_CUDA_GRAPH_REINSTANTIATE, 1, "argument 1 (4 bytes at offset 8) differs, must match"},
        {"scalar (may differ)", MD_CUDA_GRAPH_UPDATABLE, 2, "argument 2 (4 bytes at offset 12) differs, may differ"},
        {"struct (must match)", MD_CUDA_GRAPH_REINSTANTIATE, 3, "argument 3 (32 bytes at offset 16) differs, must match"},
        {"launch shape (must match)", MD_CUDA_GRAPH_REINSTANTIATE, -1, "launch shape"},
        {"another kernel", MD_CUDA_GRAPH_REINSTANTIATE, -1, "replaces kernel probe_kernel"},
        {"one node more", MD_CUDA_GRAPH_REINSTANTIATE, -1, "topology: 3 nodes and 2 edges (was 2 and 1)"},
        {"memset value (may differ)", MD_CUDA_GRAPH_UPDATABLE, -1, "memset destination or value differs"},
        {"memset destination (may differ)", MD_CUDA_GRAPH_UPDATABLE, -1, "memset destination or value differs"},
        {"memset size (must match)", MD_CUDA_GRAPH_REINSTANTIATE, -1, "sizes must match"},
        {"unregistered: pointer", MD_CUDA_GRAPH_REINSTANTIATE, 0, "unregistered kernel: bytewise"},
        {"unregistered: scalar", MD_CUDA_GRAPH_REINSTANTIATE, 2, "unregistered kernel: bytewise"},
        {"unregistered: identical", MD_CUDA_GRAPH_IDENTICAL, -1, "identical"},
        {"ignored argument", MD_CUDA_GRAPH_IDENTICAL, -1, "identical"},
        {"ignored argument and pointer", MD_CUDA_GRAPH_UPDATABLE, 0, "argument 0"},
        {"ignore kernel: launch shape (may differ)", MD_CUDA_GRAPH_UPDATABLE, -1, "may differ"},
        {"a kernel of the same family", MD_CUDA_GRAPH_UPDATABLE, -1, "replaces kernel probe_kernel of its family probe"},
        {"the same family, and a size", MD_CUDA_GRAPH_REINSTANTIATE, 1, "argument 1"},
        {"the same family, another layout", MD_CUDA_GRAPH_REINSTANTIATE, -1, "of its family, with another parameter layout"},
    };
    const int ncase = (int)(sizeof cases / sizeof cases[0]);
    probe_fixture f;
    int k;
    NEED_GPU();
    MD_CHECK_OK(probe_register());
    MD_CHECK_OK(probe_fixture_make(&f, 4096));
    for (k = 0; k < ncase; k++) {
        const compare_case *cc = &cases[k];
        probe_args a, b;
        cudaGraph_t ga = NULL, gb = NULL;
        md_cuda_graph_verdict v;
        probe_base(&a, &f);
        if (k >= 11 && k <= 13) a.which = 1;
        if (k >= 14 && k <= 16) a.which = 2;
        b = a;
        switch (k) {
        case 1: b.out = f.d_out[1]; break;
        case 2: b.n = a.n - 1; break;
        case 3: b.scale = 0.5f; break;
        case 4: b.box.lo[1] = 7.0f; break;
        case 5: b.grid = a.grid + 1; break;
        case 6: b.which = 1; break;
        case 7: b.extra = 1; break;
        case 8: b.side_value = 0x22; break;
        case 9: b.side = f.d_side[1]; break;
        case 10: b.side_count = 32; break;
        case 11: b.out = f.d_out[1]; break;
        case 12: b.scale = 0.5f; break;
        case 14: b.box.tag = 99; break;
        case 15: b.box.tag = 99; b.out = f.d_out[1]; break;
        case 16: b.grid = a.grid + 2; break;
        case 17: b.which = 3; b.scale = 1.75f; break;
        case 18: b.which = 3; b.n = a.n - 5; break;
        case 19: b.which = 2; break;
        default: break;
        }
        MD_CHECK_OK(md_cuda_graph_capture(f.s, probe_enqueue, &a, &ga));
        MD_CHECK_OK(md_cuda_graph_capture(f.s, probe_enqueue, &b, &gb));
        MD_CHECK_OK(md_cuda_graph_compare(ga, gb, &v));
        MD_CHECKF(v.match == cc->want, "%s: verdict %s (%s), want %s", cc->what, md_cuda_graph_match_name(v.match), v.reason,
                  md_cuda_graph_match_name(cc->want));
        MD_CHECKF(v.param == cc->param, "%s: names argument %d, want %d (%s)", cc->what, v.param, cc->param, v.reason);
        MD_CHECKF(strstr(v.reason, cc->reason) != NULL, "%s: reason '%s' lacks '%s'", cc->what, v.reason, cc->reason);
        if (cc->want != MD_CUDA_GRAPH_IDENTICAL)
            MD_CHECKF(v.node == (k == 7 ? -1 : k >= 8 && k <= 10 ? 0 : 1), "%s: names node %d", cc->what, v.node);
        if (cc->want == MD_CUDA_GRAPH_IDENTICAL) MD_CHECK(v.differing == 0 && v.nodes == 2);
        if (cc->want == MD_CUDA_GRAPH_UPDATABLE) {
            md_cuda_graph_cache c;
            cudaGraphExecUpdateResultInfo info;
            long bad;
            memset(&c, 0, sizeof c);
            MD_CHECK(cudaGraphInstantiate(&c.exec, ga, 0) == cudaSuccess);
            MD_CHECKF(cudaGraphExecUpdate(c.exec, gb, &info) == cudaSuccess, "%s: cudaGraphExecUpdate refused (result %d)",
                      cc->what, (int)info.result);
            bad = probe_check_launch(&f, &c, &b);
            MD_CHECKF(bad == 0, "%s: the updated graph computed %ld wrong values", cc->what, bad);
            (void)cudaGraphExecDestroy(c.exec);
        }
        (void)cudaGraphDestroy(ga);
        (void)cudaGraphDestroy(gb);
    }
    probe_fixture_free(&f);
}

/* A difference inside a child graph is found and named with the child's node ("node 0.1"). */
static void compare_descends_into_child_graphs(void) {
    probe_fixture f;
    probe_args a, b;
    cudaGraph_t ca = NULL, cb = NULL, ga = NULL, gb = NULL;
    cudaGraphNode_t n;
    md_cuda_graph_verdict v;
    NEED_GPU();
    MD_CHECK_OK(probe_register());
    MD_CHECK_OK(probe_fixture_make(&f, 4096));
    probe_base(&a, &f);
    b = a;
    b.n = a.n - 3;
    MD_CHECK_OK(md_cuda_graph_capture(f.s, probe_enqueue, &a, &ca));
    MD_CHECK_OK(md_cuda_graph_capture(f.s, probe_enqueue, &b, &cb));
    MD_CHECK(cudaGraphCreate(&ga, 0) == cudaSuccess && cudaGraphCreate(&gb, 0) == cudaSuccess);
    MD_CHECK(cudaGraphAddChildGraphNode(&n, ga, NULL, 0, ca) == cudaSuccess);
    MD_CHECK(cudaGraphAddChildGraphNode(&n, gb, NULL, 0, cb) == cudaSuccess);
    MD_CHECK_OK(md_cuda_graph_compare(ga, gb, &v));
    MD_CHECKF(v.match == MD_CUDA_GRAPH_REINSTANTIATE && v.node == 0 && v.param == 1, "%s", v.reason);
    MD_CHECKF(strstr(v.reason, "node 0.1 (kernel probe_kernel)") != NULL, "%s", v.reason);
    MD_CHECK_OK(md_cuda_graph_compare(ga, ga, &v));
    MD_CHECK(v.match == MD_CUDA_GRAPH_IDENTICAL && v.nodes == 3);
    (void)cudaGraphDestroy(ga);
    (void)cudaGraphDestroy(gb);
    (void)cudaGraphDestroy(ca);
    (void)cudaGraphDestroy(cb);
    probe_fixture_free(&f);
}

/* md_cuda_graph_kernel_diff finds exactly the kernel node that differs between two graphs of one
 * topology (the probe replaced by its family's other kernel, with another scale); an executable
 * of the first graph given that node's parameters (md_cuda_graph_exec_set_kernels) computes the
 * second graph's result, and back again. A memset that differs, or another topology, is refused. */
static void kernel_diff_and_set(void) {
    probe_fixture f;
    probe_args a, b, m, t;
    cudaGraph_t ga = NULL, gb = NULL, gm = NULL, gt = NULL;
    cudaGraphNode_t in_a[4], in_b[4];
    md_cuda_graph_cache c;
    int count = -1;
    NEED_GPU();
    MD_CHECK_OK(probe_register());
    MD_CHECK_OK(probe_fixture_make(&f, 4096));
    probe_base(&a, &f);
    b = a;
    b.which = 3;
    b.scale = -0.8125f;
    m = a;
    m.side_value = 0x33;
    t = a;
    t.extra = 1;
    MD_CHECK_OK(md_cuda_graph_capture(f.s, probe_enqueue, &a, &ga));
    MD_CHECK_OK(md_cuda_graph_capture(f.s, probe_enqueue, &b, &gb));
    MD_CHECK_OK(md_cuda_graph_capture(f.s, probe_enqueue, &m, &gm));
    MD_CHECK_OK(md_cuda_graph_capture(f.s, probe_enqueue, &t, &gt));
    MD_CHECK_OK(md_cuda_graph_kernel_diff(ga, gb, in_a, in_b, 4, &count));
    MD_CHECK(count == 1);
    MD_CHECK_OK(md_cuda_graph_kernel_diff(ga, ga, in_a + 1, in_b + 1, 3, &count));
    MD_CHECK(count == 0);
    MD_CHECK_ERROR(md_cuda_graph_kernel_diff(ga, gm, in_a + 1, in_b + 1, 3, &count), MD_ERR_INVALID_ARGUMENT, "not a kernel node");
    MD_CHECK_ERROR(md_cuda_graph_kernel_diff(ga, gt, in_a + 1, in_b + 1, 3, &count), MD_ERR_INVALID_ARGUMENT, "another topology");
    MD_CHECK_ERROR(md_cuda_graph_kernel_diff(ga, gb, in_a + 1, in_b + 1, 0, &count), MD_ERR_INVALID_ARGUMENT, "cap");
    memset(&c, 0, sizeof c);
    MD_CHECK(cudaGraphInstantiate(&c.exec, ga, 0) == cudaSuccess);
    MD_CHECK(probe_check_launch(&f, &c, &a) == 0);
    MD_CHECK_OK(md_cuda_graph_exec_set_kernels(c.exec, in_a, in_b, 1));
    MD_CHECK(probe_check_launch(&f, &c, &b) == 0);
    MD_CHECK_OK(md_cuda_graph_exec_set_kernels(c.exec, in_a, in_a, 1)); /* back to the first graph's */
    MD_CHECK(probe_check_launch(&f, &c, &a) == 0);
    (void)cudaGraphExecDestroy(c.exec);
    (void)cudaGraphDestroy(ga);
    (void)cudaGraphDestroy(gb);
    (void)cudaGraphDestroy(gm);
    (void)cudaGraphDestroy(gt);
    probe_fixture_free(&f);
}

/* Timestamps in stream order: three stamps around two 20 us spins, on a stream and in a captured
 * graph, rise by at least the spin (the global timer is in ns; some GPUs update it only every
 * microsecond, hence the 10 us margin), the count stops at the cap, and a stamp past the cap
 * writes nothing. */
__global__ void stamp_spin_kernel(long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while ((long long)(t - t0) < ns);
}

typedef struct stamp_ctx {
    unsigned long long *d_t;
    long long *d_next;
} stamp_ctx;

static md_status stamp_enqueue(void *ctx, cudaStream_t s) {
    const stamp_ctx *c = (const stamp_ctx *)ctx;
    md_status st;
    int k;
    for (k = 0; k < 4; k++) { /* the fourth is past the cap */
        if ((st = md_cuda_timestamp_enqueue(s, c->d_t, c->d_next, 3)) != MD_OK) return st;
        if (k < 2) MD_CUDA_LAUNCH(stamp_spin_kernel, 1, 1, 0, s, 20000LL);
    }
    return MD_OK;
}

static void timestamps_in_stream_order(void) {
    cudaStream_t s = NULL;
    stamp_ctx c;
    unsigned long long t[4];
    long long next = -1;
    md_cuda_graph_cache g;
    int pass;
    NEED_GPU();
    memset(&g, 0, sizeof g);
    MD_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    MD_CHECK_OK(md_cuda_alloc((void **)&c.d_t, 4, sizeof(unsigned long long), "stamps"));
    MD_CHECK_OK(md_cuda_alloc((void **)&c.d_next, 1, sizeof(long long), "next"));
    MD_CHECK_ERROR(md_cuda_timestamp_enqueue(s, NULL, c.d_next, 3), MD_ERR_INVALID_ARGUMENT, "d_times");
    MD_CHECK_ERROR(md_cuda_timestamp_enqueue(s, c.d_t, c.d_next, -1), MD_ERR_INVALID_ARGUMENT, "cap");
    MD_CHECK_OK(md_cuda_graph_cache_capture(&g, s, stamp_enqueue, &c));
    for (pass = 0; pass < 2; pass++) {
        MD_CHECK(cudaMemsetAsync(c.d_t, 0, sizeof t, s) == cudaSuccess);
        MD_CHECK(cudaMemsetAsync(c.d_next, 0, sizeof next, s) == cudaSuccess);
        if (pass == 0) MD_CHECK_OK(stamp_enqueue(&c, s));
        else MD_CHECK_OK(md_cuda_graph_cache_launch(&g, s));
        MD_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
        MD_CHECK(cudaMemcpy(t, c.d_t, sizeof t, cudaMemcpyDeviceToHost) == cudaSuccess);
        MD_CHECK(cudaMemcpy(&next, c.d_next, sizeof next, cudaMemcpyDeviceToHost) == cudaSuccess);
        MD_CHECKF(next == 3 && t[3] == 0, "%s: next %lld, t[3] %llu", pass ? "graph" : "stream", next, t[3]);
        MD_CHECKF(t[1] >= t[0] + 10000 && t[2] >= t[1] + 10000, "%s: stamps %llu %llu %llu", pass ? "graph" : "stream", t[0],
                  t[1], t[2]);
    }
    md_cuda_graph_cache_destroy(&g);
    md_cuda_free(c.d_t);
    md_cuda_free(c.d_next);
    (void)cudaStreamDestroy(s);
}

/* ---- the cache ---- */

/* A sequence of captures through one cache (policy COMPARE): the counters say exactly which
 * path each took (first: instantiated; same: identical; pointer: updated; same again:
 * identical; size: instantiated; scalar: updated), every launch computes the captured
 * arguments' result, and the last verdict names the size argument. With policy REINSTANTIATE
 * every capture is instantiated. */
static void cache_counts_updates_and_instantiations(void) {
    probe_fixture f;
    probe_args seq[6];
    md_cuda_graph_cache c;
    static const long long want_inst[6] = {1, 1, 1, 1, 2, 2}, want_upd[6] = {0, 0, 1, 1, 1, 2},
                           want_same[6] = {0, 1, 1, 2, 2, 2};
    int k;
    NEED_GPU();
    MD_CHECK_OK(probe_register());
    MD_CHECK_OK(probe_fixture_make(&f, 4096));
    probe_base(&seq[0], &f);
    seq[1] = seq[0];
    seq[2] = seq[0];
    seq[2].out = f.d_out[1];
    seq[3] = seq[2];
    seq[4] = seq[3];
    seq[4].n = 900;
    seq[5] = seq[4];
    seq[5].scale = -1.5f;
    memset(&c, 0, sizeof c);
    for (k = 0; k < 6; k++) {
        long bad;
        MD_CHECK_OK(md_cuda_graph_cache_capture(&c, f.s, probe_enqueue, &seq[k]));
        MD_CHECKF(c.instantiations == want_inst[k] && c.updates == want_upd[k] && c.identical == want_same[k],
                  "capture %d: %lld instantiations, %lld updates, %lld identical (last: %s)", k, c.instantiations,
                  c.updates, c.identical, c.last.reason);
        if (k == 4) MD_CHECKF(c.last.param == 1 && c.last.match == MD_CUDA_GRAPH_REINSTANTIATE, "%s", c.last.reason);
        bad = probe_check_launch(&f, &c, &seq[k]);
        MD_CHECKF(bad == 0, "capture %d: %ld wrong values", k, bad);
    }
    MD_CHECK(c.captures == 6 && c.launches == 6 && c.refused == 0);
    md_cuda_graph_cache_destroy(&c);
    MD_CHECK(c.exec == NULL && c.graph == NULL && c.snap == NULL);
    c.policy = MD_CUDA_GRAPH_POLICY_REINSTANTIATE;
    for (k = 0; k < 3; k++) MD_CHECK_OK(md_cuda_graph_cache_capture(&c, f.s, probe_enqueue, &seq[0]));
    MD_CHECK(c.instantiations == 3 && c.updates == 0 && c.identical == 0);
    MD_CHECK(probe_check_launch(&f, &c, &seq[0]) == 0);
    md_cuda_graph_cache_destroy(&c);
    probe_fixture_free(&f);
}

/* ---- the toy step: a random walk with a device-decided rebuild ---- */

/* u in [-1, 1) from (step, atom): 24 hash bits scaled by powers of two, so exact in float. */
static __host__ __device__ inline float toy_u(long long step, int i) {
    unsigned int h = (unsigned int)step * 2654435761u ^ (unsigned int)i * 2246822519u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    h *= 3266489917u;
    h ^= h >> 16;
    return (float)(h & 0xFFFFFFu) * (1.0f / 8388608.0f) - 1.0f;
}

/* x += amp u(step, i), step read from the device counter (stream and graph alike). */
__global__ void toy_move_kernel(float *x, int n, const long long *step, float amp) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fadd_rn(x[i], __fmul_rn(amp, toy_u(*step, i)));
}

/* The same with the step as an argument: the kernel whose argument changes every step. */
__global__ void toy_move_arg_kernel(float *x, int n, long long step, float amp) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fadd_rn(x[i], __fmul_rn(amp, toy_u(step, i)));
}

__global__ void toy_reset_kernel(long long *word) { *word = 0; }

/* word = 1 when some |x - xref| > limit (every writer writes 1: a benign race). */
__global__ void toy_check_kernel(const float *x, const float *xref, int n, float limit, long long *word) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && fabsf(__fsub_rn(x[i], xref[i])) > limit) *word = 1;
}

/* When the word is set: xref = x, and the step is logged (log[step] = 1). */
__global__ void toy_rebuild_kernel(const float *x, float *xref, int n, const long long *word, const long long *step,
                                   int *log, int log_cap) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (*word == 0) return;
    if (i < n) xref[i] = x[i];
    if (i == 0 && *step < log_cap) log[*step] = 1;
}

__global__ void toy_tick_kernel(long long *step) { *step += 1; }

typedef struct toy {
    int n, steps, grid;
    float amp, limit;
    float *d_x, *d_xref;
    long long *d_step, *d_word, *d_count;
    int *d_log;
    unsigned long long *d_flags;
    cudaStream_t s, body, body2;
    float *h_x0;
    long long arg_step; /* toy_move_arg_kernel's step, for the dynamic-argument versions */
    cudaGraphNode_t move_node;
} toy;

static md_status toy_register(void) {
    md_status st;
    if ((st = md_cuda_graph_register((const void *)toy_move_kernel, "DMDD", MD_CUDA_PARAM_MUST_MATCH)) != MD_OK) return st;
    return md_cuda_graph_register((const void *)toy_move_arg_kernel, "DMDD", MD_CUDA_PARAM_MUST_MATCH);
}

static md_status toy_make(toy *t, int n, int steps) {
    md_rng rng;
    md_status st;
    int i;
    memset(t, 0, sizeof *t);
    t->n = n;
    t->steps = steps;
    t->grid = (n + 127) / 128;
    t->amp = 0.01f;
    t->limit = 0.05f;
    MD_CUDA_TRY(cudaStreamCreateWithFlags(&t->s, cudaStreamNonBlocking));
    MD_CUDA_TRY(cudaStreamCreateWithFlags(&t->body, cudaStreamNonBlocking));
    MD_CUDA_TRY(cudaStreamCreateWithFlags(&t->body2, cudaStreamNonBlocking));
    if ((st = md_cuda_alloc((void **)&t->d_x, (size_t)n, sizeof(float), "x")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t->d_xref, (size_t)n, sizeof(float), "xref")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t->d_step, 3, sizeof(long long), "step")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t->d_log, (size_t)steps + 1, sizeof(int), "log")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t->d_flags, MD_CUDA_FLAG_WORDS, sizeof(unsigned long long), "flags")) != MD_OK)
        return st;
    t->d_word = t->d_step + 1;
    t->d_count = t->d_step + 2;
    if (!(t->h_x0 = (float *)md_alloc_array((size_t)n, sizeof(float)))) return MD_ERR_OUT_OF_MEMORY;
    md_rng_seed(&rng, 909);
    for (i = 0; i < n; i++) t->h_x0[i] = (float)(4.0 * md_rng_uniform(&rng));
    return toy_register();
}

static void toy_free(toy *t) {
    cudaStream_t *ss[3] = {&t->s, &t->body, &t->body2};
    int k;
    for (k = 0; k < 3; k++)
        if (*ss[k]) {
            (void)cudaStreamSynchronize(*ss[k]);
            (void)cudaStreamDestroy(*ss[k]);
        }
    md_cuda_free(t->d_x);
    md_cuda_free(t->d_xref);
    md_cuda_free(t->d_step);
    md_cuda_free(t->d_log);
    md_cuda_free(t->d_flags);
    md_free(t->h_x0);
    memset(t, 0, sizeof *t);
}

/* x = xref = x0, step = 0, log and flags zero. */
static md_status toy_reset(toy *t) {
    MD_CUDA_TRY(cudaMemcpyAsync(t->d_x, t->h_x0, (size_t)t->n * sizeof(float), cudaMemcpyHostToDevice, t->s));
    MD_CUDA_TRY(cudaMemcpyAsync(t->d_xref, t->h_x0, (size_t)t->n * sizeof(float), cudaMemcpyHostToDevice, t->s));
    MD_CUDA_TRY(cudaMemsetAsync(t->d_step, 0, 3 * sizeof(long long), t->s));
    MD_CUDA_TRY(cudaMemsetAsync(t->d_log, 0, ((size_t)t->steps + 1) * sizeof(int), t->s));
    MD_CUDA_TRY(cudaMemsetAsync(t->d_flags, 0, MD_CUDA_FLAG_WORDS * sizeof(unsigned long long), t->s));
    MD_CUDA_TRY(cudaStreamSynchronize(t->s));
    return MD_OK;
}

/* What a run leaves: positions, reference positions, rebuild log, step counter. */
typedef struct toy_result {
    float *x, *xref;
    int *log;
    long long step, count;
} toy_result;

static md_status toy_read(toy *t, toy_result *r) {
    MD_CUDA_TRY(cudaStreamSynchronize(t->s));
    MD_CUDA_TRY(cudaMemcpy(r->x, t->d_x, (size_t)t->n * sizeof(float), cudaMemcpyDeviceToHost));
    MD_CUDA_TRY(cudaMemcpy(r->xref, t->d_xref, (size_t)t->n * sizeof(float), cudaMemcpyDeviceToHost));
    MD_CUDA_TRY(cudaMemcpy(r->log, t->d_log, (size_t)t->steps * sizeof(int), cudaMemcpyDeviceToHost));
    MD_CUDA_TRY(cudaMemcpy(&r->step, t->d_step, sizeof(long long), cudaMemcpyDeviceToHost));
    MD_CUDA_TRY(cudaMemcpy(&r->count, t->d_count, sizeof(long long), cudaMemcpyDeviceToHost));
    return MD_OK;
}

static int toy_result_alloc(toy_result *r, int n, int steps) {
    memset(r, 0, sizeof *r);
    r->x = (float *)md_alloc_array((size_t)n, sizeof(float));
    r->xref = (float *)md_alloc_array((size_t)n, sizeof(float));
    r->log = (int *)md_alloc_array((size_t)steps, sizeof(int));
    return r->x && r->xref && r->log;
}

static void toy_result_free(toy_result *r) {
    md_free(r->x);
    md_free(r->xref);
    md_free(r->log);
    memset(r, 0, sizeof *r);
}

/* The host reference: the same float operations, the same rebuild rule. */
static void toy_host(const toy *t, toy_result *r) {
    int k, i;
    memcpy(r->x, t->h_x0, (size_t)t->n * sizeof(float));
    memcpy(r->xref, t->h_x0, (size_t)t->n * sizeof(float));
    memset(r->log, 0, (size_t)t->steps * sizeof(int));
    for (k = 0; k < t->steps; k++) {
        int rebuild = 0;
        for (i = 0; i < t->n; i++) {
            const float d = t->amp * toy_u(k, i);
            r->x[i] = r->x[i] + d;
        }
        for (i = 0; i < t->n; i++)
            if (fabsf(r->x[i] - r->xref[i]) > t->limit) rebuild = 1;
        if (rebuild) {
            memcpy(r->xref, r->x, (size_t)t->n * sizeof(float));
            r->log[k] = 1;
        }
    }
    r->step = t->steps;
}

/* Bitwise equality of two results over positions, reference positions, log and step. */
static int toy_same(const toy *t, const toy_result *a, const toy_result *b) {
    return memcmp(a->x, b->x, (size_t)t->n * sizeof(float)) == 0 && memcmp(a->xref, b->xref, (size_t)t->n * sizeof(float)) == 0 &&
           memcmp(a->log, b->log, (size_t)t->steps * sizeof(int)) == 0 && a->step == b->step;
}

static int toy_rebuilds(const toy *t, const toy_result *r) {
    int k, c = 0;
    for (k = 0; k < t->steps; k++) c += r->log[k];
    return c;
}

/* The parts of a step. */
static md_status toy_check_part(toy *t, cudaStream_t s) {
    MD_CUDA_LAUNCH(toy_reset_kernel, 1, 1, 0, s, t->d_word);
    MD_CUDA_LAUNCH(toy_check_kernel, t->grid, 128, 0, s, t->d_x, t->d_xref, t->n, t->limit, t->d_word);
    return MD_OK;
}

static md_status toy_rebuild_part(void *ctx, cudaStream_t s) {
    toy *t = (toy *)ctx;
    MD_CUDA_LAUNCH(toy_rebuild_kernel, t->grid, 128, 0, s, t->d_x, t->d_xref, t->n, t->d_word, t->d_step, t->d_log, t->steps);
    return MD_OK;
}

/* One step as the stream runs it: the rebuild kernel launched every step, gated by the word. */
static md_status toy_step_stream(void *ctx, cudaStream_t s) {
    toy *t = (toy *)ctx;
    md_status st;
    MD_CUDA_LAUNCH(toy_move_kernel, t->grid, 128, 0, s, t->d_x, t->n, t->d_step, t->amp);
    if ((st = toy_check_part(t, s)) != MD_OK || (st = toy_rebuild_part(t, s)) != MD_OK) return st;
    MD_CUDA_LAUNCH(toy_tick_kernel, 1, 1, 0, s, t->d_step);
    return MD_OK;
}

/* One step for a graph: the rebuild inside an IF node the device word decides (its body on
 * t->body2). */
static md_status toy_step_if(void *ctx, cudaStream_t s) {
    toy *t = (toy *)ctx;
    cudaGraphConditionalHandle h;
    md_status st;
    MD_CUDA_LAUNCH(toy_move_kernel, t->grid, 128, 0, s, t->d_x, t->n, t->d_step, t->amp);
    if ((st = toy_check_part(t, s)) != MD_OK || (st = md_cuda_graph_cond_handle(s, 0, 0, &h)) != MD_OK ||
        (st = md_cuda_graph_cond_from_word(s, h, t->d_word)) != MD_OK ||
        (st = md_cuda_graph_cond_node(s, t->body2, cudaGraphCondTypeIf, h, toy_rebuild_part, t, NULL)) != MD_OK)
        return st;
    MD_CUDA_LAUNCH(toy_tick_kernel, 1, 1, 0, s, t->d_step);
    return MD_OK;
}

/* One step written once for both paths: md_cuda_graph_run_if makes the rebuild an IF node when
 * captured and a device-gated launch on a stream. */
static md_status toy_step_run_if(void *ctx, cudaStream_t s) {
    toy *t = (toy *)ctx;
    md_status st;
    MD_CUDA_LAUNCH(toy_move_kernel, t->grid, 128, 0, s, t->d_x, t->n, t->d_step, t->amp);
    if ((st = toy_check_part(t, s)) != MD_OK || (st = md_cuda_graph_run_if(s, t->body2, t->d_word, toy_rebuild_part, t)) != MD_OK)
        return st;
    MD_CUDA_LAUNCH(toy_tick_kernel, 1, 1, 0, s, t->d_step);
    return MD_OK;
}

/* One step with the step number as a kernel argument: an explicit kernel node when captured. */
static md_status toy_step_arg(void *ctx, cudaStream_t s) {
    toy *t = (toy *)ctx;
    void *args[4];
    md_status st;
    args[0] = &t->d_x;
    args[1] = &t->n;
    args[2] = &t->arg_step;
    args[3] = &t->amp;
    if ((st = md_cuda_graph_kernel_node(s, (const void *)toy_move_arg_kernel, "toy_move_arg_kernel", dim3(t->grid), dim3(128),
                                        0, args, 4, &t->move_node)) != MD_OK ||
        (st = toy_check_part(t, s)) != MD_OK || (st = toy_rebuild_part(t, s)) != MD_OK)
        return st;
    MD_CUDA_LAUNCH(toy_tick_kernel, 1, 1, 0, s, t->d_step);
    return MD_OK;
}

static md_status toy_run_stream(toy *t) {
    md_status st;
    int k;
    if ((st = toy_reset(t)) != MD_OK) return st;
    for (k = 0; k < t->steps; k++)
        if ((st = toy_step_stream(t, t->s)) != MD_OK) return st;
    return MD_OK;
}

typedef struct toy_check {
    toy t;
    toy_result host, ref, got;
} toy_check;

static md_status toy_check_make(toy_check *c) {
    const int n = sanitize ? 256 : 4096, steps = sanitize ? 40 : 200;
    md_status st;
    memset(c, 0, sizeof *c);
    if ((st = toy_make(&c->t, n, steps)) != MD_OK) return st;
    if (!toy_result_alloc(&c->host, n, steps) || !toy_result_alloc(&c->ref, n, steps) || !toy_result_alloc(&c->got, n, steps))
        return MD_ERR_OUT_OF_MEMORY;
    toy_host(&c->t, &c->host);
    if ((st = toy_run_stream(&c->t)) != MD_OK) return st;
    return toy_read(&c->t, &c->ref);
}

static void toy_check_free(toy_check *c) {
    toy_free(&c->t);
    toy_result_free(&c->host);
    toy_result_free(&c->ref);
    toy_result_free(&c->got);
}

/* The stream version agrees bitwise with the host reference and rebuilds at least twice and
 * not every step (so the IF node below is tested both ways). */
static void toy_stream_matches_host(void) {
    toy_check c;
    int nreb;
    NEED_GPU();
    MD_CHECK_OK(toy_check_make(&c));
    nreb = toy_rebuilds(&c.t, &c.host);
    MD_CHECKF(nreb >= 2 && nreb < c.t.steps / 2, "the host reference rebuilds %d times in %d steps", nreb, c.t.steps);
    MD_CHECKF(toy_same(&c.t, &c.ref, &c.host), "stream and host differ (stream rebuilds %d, host %d)",
              toy_rebuilds(&c.t, &c.ref), nreb);
    toy_check_free(&c);
}

/* One captured step (plain stream launches captured), launched once per step: bitwise the
 * stream's trajectory. Then the IF-node step, built from the primitives and through
 * md_cuda_graph_run_if: its rebuilds happen exactly at the stream's steps, and the trajectory
 * is bitwise the stream's. md_cuda_graph_run_if's step run on the stream is the stream's too. */
static void captured_step_and_if_node_match_stream(void) {
    static const md_cuda_bench_fn steps[3] = {toy_step_stream, toy_step_if, toy_step_run_if};
    static const char *const names[3] = {"captured step", "IF node", "md_cuda_graph_run_if"};
    toy_check c;
    int pass, k;
    NEED_GPU();
    MD_CHECK_OK(toy_check_make(&c));
    MD_CHECK_OK(toy_reset(&c.t));
    for (k = 0; k < c.t.steps; k++) MD_CHECK_OK(toy_step_run_if(&c.t, c.t.s));
    MD_CHECK_OK(toy_read(&c.t, &c.got));
    MD_CHECKF(toy_same(&c.t, &c.got, &c.ref), "md_cuda_graph_run_if on a stream: trajectory differs from the stream's");
    for (pass = 0; pass < 3; pass++) {
        md_cuda_graph_cache g;
        memset(&g, 0, sizeof g);
        MD_CHECK_OK(toy_reset(&c.t));
        MD_CHECK_OK(md_cuda_graph_cache_capture(&g, c.t.s, steps[pass], &c.t));
        for (k = 0; k < c.t.steps; k++) MD_CHECK_OK(md_cuda_graph_cache_launch(&g, c.t.s));
        MD_CHECK_OK(toy_read(&c.t, &c.got));
        md_cuda_graph_cache_destroy(&g);
        MD_CHECKF(memcmp(c.got.log, c.ref.log, (size_t)c.t.steps * sizeof(int)) == 0,
                  "%s: rebuilds at other steps than the stream's (%d vs %d rebuilds)", names[pass], toy_rebuilds(&c.t, &c.got),
                  toy_rebuilds(&c.t, &c.ref));
        MD_CHECKF(toy_same(&c.t, &c.got, &c.ref), "%s: trajectory differs from the stream's", names[pass]);
    }
    toy_check_free(&c);
}

/* The step number as a kernel argument. Outside a capture md_cuda_graph_kernel_node launches
 * (node NULL) and gives the stream's trajectory; captured once (policy REINSTANTIATE, so the
 * captured graph and its node are kept), then per step md_cuda_graph_kernel_node_set with the
 * new step and one launch: bitwise the stream's trajectory, with no further capture. A wrong
 * argument count is refused. Then the same through re-capture every step with policy COMPARE:
 * every capture after the first is updatable (the step argument may differ) and never
 * re-instantiated. */
static void dynamic_arguments_match_stream(void) {
    toy_check c;
    md_cuda_graph_cache g;
    int k;
    NEED_GPU();
    MD_CHECK_OK(toy_check_make(&c));
    MD_CHECK_OK(toy_reset(&c.t));
    for (k = 0; k < c.t.steps; k++) {
        c.t.arg_step = k;
        MD_CHECK_OK(toy_step_arg(&c.t, c.t.s));
        MD_CHECK(c.t.move_node == NULL);
    }
    MD_CHECK_OK(toy_read(&c.t, &c.got));
    MD_CHECKF(toy_same(&c.t, &c.got, &c.ref), "explicit-node launches outside a capture differ from the stream's");

    MD_CHECK_OK(toy_reset(&c.t));
    memset(&g, 0, sizeof g);
    g.policy = MD_CUDA_GRAPH_POLICY_REINSTANTIATE;
    c.t.arg_step = 0;
    MD_CHECK_OK(md_cuda_graph_cache_capture(&g, c.t.s, toy_step_arg, &c.t));
    MD_CHECK(c.t.move_node != NULL);
    for (k = 0; k < c.t.steps; k++) {
        long long step = k;
        void *args[4] = {&c.t.d_x, &c.t.n, &step, &c.t.amp};
        MD_CHECK_OK(md_cuda_graph_kernel_node_set(g.exec, c.t.move_node, (const void *)toy_move_arg_kernel, dim3(c.t.grid),
                                                  dim3(128), 0, args, 4));
        MD_CHECK_OK(md_cuda_graph_cache_launch(&g, c.t.s));
    }
    MD_CHECK_OK(toy_read(&c.t, &c.got));
    MD_CHECK(g.captures == 1 && g.instantiations == 1);
    MD_CHECKF(toy_same(&c.t, &c.got, &c.ref), "per-step node arguments: trajectory differs from the stream's");
    {
        void *args[4] = {&c.t.d_x, &c.t.n, &c.t.arg_step, &c.t.amp};
        cudaGraphNode_t node;
        MD_CHECK_ERROR(md_cuda_graph_kernel_node(c.t.s, (const void *)toy_move_arg_kernel, NULL, dim3(1), dim3(1), 0, args,
                                                 3, &node),
                       MD_ERR_INVALID_ARGUMENT, "takes 4");
    }
    md_cuda_graph_cache_destroy(&g);

    MD_CHECK_OK(toy_reset(&c.t));
    memset(&g, 0, sizeof g);
    for (k = 0; k < c.t.steps; k++) {
        c.t.arg_step = k;
        MD_CHECK_OK(md_cuda_graph_cache_capture(&g, c.t.s, toy_step_arg, &c.t));
        if (k > 0)
            MD_CHECKF(g.last.match == MD_CUDA_GRAPH_UPDATABLE && g.last.param == 2, "step %d: %s", k, g.last.reason);
        MD_CHECK_OK(md_cuda_graph_cache_launch(&g, c.t.s));
    }
    MD_CHECK_OK(toy_read(&c.t, &c.got));
    MD_CHECKF(g.instantiations == 1 && g.updates == c.t.steps - 1 && g.refused == 0,
              "%lld instantiations, %lld updates, %lld refused", g.instantiations, g.updates, g.refused);
    MD_CHECKF(toy_same(&c.t, &c.got, &c.ref), "re-captured and updated: trajectory differs from the stream's");
    md_cuda_graph_cache_destroy(&g);
    toy_check_free(&c);
}

/* ---- WHILE loops ---- */

/* pass = *count: marks[pass] += 1 (one thread), and at pass `raise_at` the flags word is set. */
__global__ void loop_mark_kernel(int *marks, const long long *count, unsigned long long *flags, long long raise_at) {
    const long long pass = *count;
    marks[pass] += 1;
    if (pass == raise_at) flags[0] = 1;
}

typedef struct loop_ctx {
    int *d_marks;
    long long *d_count;
    unsigned long long *d_flags;
    long long raise_at;
} loop_ctx;

static md_status loop_body(void *ctx, cudaStream_t s) {
    const loop_ctx *l = (const loop_ctx *)ctx;
    MD_CUDA_LAUNCH(loop_mark_kernel, 1, 1, 0, s, l->d_marks, l->d_count, l->d_flags, l->raise_at);
    return MD_OK;
}

typedef struct loop_graph {
    loop_ctx l;
    cudaStream_t body;
    long long n;
} loop_graph;

static md_status loop_enqueue(void *ctx, cudaStream_t s) {
    loop_graph *g = (loop_graph *)ctx;
    return md_cuda_graph_loop(s, g->body, g->l.d_count, g->n, g->l.d_flags, loop_body, &g->l);
}

/* A WHILE loop of n passes (n = 0, 1, 7, 300) runs its body exactly n times per launch: the
 * count is n, marks[0..n-1] are 1 after one launch and 2 after a second (the count restarts at
 * every launch), marks[n..] stay 0. A flag raised in pass 4 of a 50-pass loop ends it after 5
 * passes. Outside a capture the loop is refused. */
static void while_loop_runs_exactly_n_passes(void) {
    const long long ns[4] = {0, 1, 7, 300};
    const int cap = 320;
    cudaStream_t s = NULL, body = NULL;
    loop_graph lg;
    int *h = NULL, i, t;
    long long count = -1;
    NEED_GPU();
    memset(&lg, 0, sizeof lg);
    MD_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    MD_CHECK(cudaStreamCreateWithFlags(&body, cudaStreamNonBlocking) == cudaSuccess);
    MD_CHECK_OK(md_cuda_alloc((void **)&lg.l.d_marks, (size_t)cap, sizeof(int), "marks"));
    MD_CHECK_OK(md_cuda_alloc((void **)&lg.l.d_count, 1, sizeof(long long), "count"));
    MD_CHECK_OK(md_cuda_alloc((void **)&lg.l.d_flags, MD_CUDA_FLAG_WORDS, sizeof(unsigned long long), "flags"));
    MD_CHECK((h = (int *)md_alloc_array((size_t)cap, sizeof(int))) != NULL);
    lg.body = body;
    MD_CHECK_ERROR(loop_enqueue(&lg, s), MD_ERR_INVALID_ARGUMENT, "not capturing");
    for (t = 0; t < 5; t++) {
        md_cuda_graph_cache c;
        const long long n = t < 4 ? ns[t] : 50;
        int launch;
        lg.n = n;
        lg.l.raise_at = t < 4 ? -1 : 4;
        memset(&c, 0, sizeof c);
        MD_CHECK(cudaMemsetAsync(lg.l.d_marks, 0, (size_t)cap * sizeof(int), s) == cudaSuccess);
        MD_CHECK(cudaMemsetAsync(lg.l.d_flags, 0, MD_CUDA_FLAG_WORDS * sizeof(unsigned long long), s) == cudaSuccess);
        MD_CHECK_OK(md_cuda_graph_cache_capture(&c, s, loop_enqueue, &lg));
        for (launch = 1; launch <= (t < 4 ? 2 : 1); launch++) {
            const long long want = t < 4 ? n : 5;
            MD_CHECK(cudaMemsetAsync(lg.l.d_count, 0xFF, sizeof(long long), s) == cudaSuccess); /* poison */
            MD_CHECK_OK(md_cuda_graph_cache_launch(&c, s));
            MD_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
            MD_CHECK(cudaMemcpy(&count, lg.l.d_count, sizeof count, cudaMemcpyDeviceToHost) == cudaSuccess);
            MD_CHECK(cudaMemcpy(h, lg.l.d_marks, (size_t)cap * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
            MD_CHECKF(count == want, "n = %lld, launch %d: %lld passes, want %lld", n, launch, count, want);
            for (i = 0; i < cap; i++)
                MD_CHECKF(h[i] == (i < want ? launch : 0), "n = %lld, launch %d: marks[%d] = %d", n, launch, i, h[i]);
        }
        md_cuda_graph_cache_destroy(&c);
    }
    md_free(h);
    md_cuda_free(lg.l.d_marks);
    md_cuda_free(lg.l.d_count);
    md_cuda_free(lg.l.d_flags);
    (void)cudaStreamDestroy(body);
    (void)cudaStreamDestroy(s);
}

/* IF nodes decided by a host-chosen device word: over 64 launches (seed 77) the body runs
 * exactly at the launches whose word is non-zero, as the host's list says. */
__global__ void if_log_kernel(int *log, const long long *k) { log[*k] = 1; }
__global__ void if_next_kernel(long long *k) { *k += 1; }

typedef struct if_ctx {
    long long *d_word, *d_k;
    int *d_log;
    cudaStream_t body;
} if_ctx;

static md_status if_body(void *ctx, cudaStream_t s) {
    const if_ctx *c = (const if_ctx *)ctx;
    MD_CUDA_LAUNCH(if_log_kernel, 1, 1, 0, s, c->d_log, c->d_k);
    return MD_OK;
}

static md_status if_enqueue(void *ctx, cudaStream_t s) {
    if_ctx *c = (if_ctx *)ctx;
    cudaGraphConditionalHandle h;
    md_status st;
    if ((st = md_cuda_graph_cond_handle(s, 0, 1, &h)) != MD_OK || (st = md_cuda_graph_cond_from_word(s, h, c->d_word)) != MD_OK ||
        (st = md_cuda_graph_cond_node(s, c->body, cudaGraphCondTypeIf, h, if_body, c, NULL)) != MD_OK)
        return st;
    MD_CUDA_LAUNCH(if_next_kernel, 1, 1, 0, s, c->d_k);
    return MD_OK;
}

static void if_node_taken_as_host_says(void) {
    enum { LAUNCHES = 64 };
    cudaStream_t s = NULL;
    if_ctx c;
    md_cuda_graph_cache g;
    long long *h_word = NULL;
    int want[LAUNCHES], got[LAUNCHES], k, ones = 0;
    md_rng rng;
    NEED_GPU();
    memset(&c, 0, sizeof c);
    memset(&g, 0, sizeof g);
    MD_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    MD_CHECK(cudaStreamCreateWithFlags(&c.body, cudaStreamNonBlocking) == cudaSuccess);
    MD_CHECK_OK(md_cuda_alloc((void **)&c.d_word, 2, sizeof(long long), "word"));
    c.d_k = c.d_word + 1;
    MD_CHECK_OK(md_cuda_alloc((void **)&c.d_log, LAUNCHES, sizeof(int), "log"));
    MD_CHECK_OK(md_cuda_alloc_pinned((void **)&h_word, LAUNCHES, sizeof(long long), "words"));
    MD_CHECK(cudaMemsetAsync(c.d_word, 0, 2 * sizeof(long long), s) == cudaSuccess);
    MD_CHECK(cudaMemsetAsync(c.d_log, 0, LAUNCHES * sizeof(int), s) == cudaSuccess);
    md_rng_seed(&rng, 77);
    for (k = 0; k < LAUNCHES; k++) {
        want[k] = md_rng_uniform(&rng) < 0.5;
        ones += want[k];
        h_word[k] = want[k] ? (long long)(1 + k) << (k % 40) : 0; /* any non-zero value, high bits too */
    }
    MD_CHECK(ones > 8 && ones < LAUNCHES - 8);
    MD_CHECK_OK(md_cuda_graph_cache_capture(&g, s, if_enqueue, &c));
    for (k = 0; k < LAUNCHES; k++) {
        MD_CHECK(cudaMemcpyAsync(c.d_word, &h_word[k], sizeof(long long), cudaMemcpyHostToDevice, s) == cudaSuccess);
        MD_CHECK_OK(md_cuda_graph_cache_launch(&g, s));
    }
    MD_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    MD_CHECK(cudaMemcpy(got, c.d_log, sizeof got, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (k = 0; k < LAUNCHES; k++) MD_CHECKF(got[k] == want[k], "launch %d: body %s", k, got[k] ? "ran" : "did not run");
    {
        cudaGraphConditionalHandle h;
        MD_CHECK_ERROR(md_cuda_graph_cond_handle(s, 0, 0, &h), MD_ERR_INVALID_ARGUMENT, "not capturing");
    }
    md_cuda_graph_cache_destroy(&g);
    md_cuda_free_pinned(h_word);
    md_cuda_free(c.d_word);
    md_cuda_free(c.d_log);
    (void)cudaStreamDestroy(c.body);
    (void)cudaStreamDestroy(s);
}

/* The whole run in one graph launch: a WHILE loop of `steps` passes whose body is the IF-node
 * step. The loop runs exactly `steps` passes, rebuilds at exactly the stream's steps, and the
 * trajectory is bitwise the stream's. Launched again in two halves (steps/2 twice, by capturing
 * the loop with n = steps/2): the same again. */
static void while_loop_of_steps_matches_stream(void) {
    toy_check c;
    int half;
    NEED_GPU();
    MD_CHECK_OK(toy_check_make(&c));
    for (half = 0; half < 2; half++) {
        md_cuda_graph_cache g;
        const long long n = half ? c.t.steps / 2 : c.t.steps;
        int launch;
        memset(&g, 0, sizeof g);
        MD_CHECK_OK(toy_reset(&c.t));
        {
            cudaGraph_t graph = NULL;
            cudaStreamCaptureStatus cs;
            md_status st;
            cudaError_t e;
            MD_CHECK(cudaStreamBeginCapture(c.t.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
            st = md_cuda_graph_loop(c.t.s, c.t.body, c.t.d_count, n, c.t.d_flags, toy_step_if, &c.t);
            e = cudaStreamEndCapture(c.t.s, &graph);
            MD_CHECK_OK(st);
            MD_CHECK(e == cudaSuccess);
            MD_CHECK(cudaStreamIsCapturing(c.t.s, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone);
            MD_CHECK(cudaGraphInstantiate(&g.exec, graph, 0) == cudaSuccess);
            g.graph = graph;
        }
        for (launch = 0; launch < (half ? 2 : 1); launch++) MD_CHECK_OK(md_cuda_graph_cache_launch(&g, c.t.s));
        MD_CHECK_OK(toy_read(&c.t, &c.got));
        md_cuda_graph_cache_destroy(&g);
        MD_CHECKF(c.got.count == n, "the loop ran %lld passes, want %lld", c.got.count, n);
        MD_CHECKF(memcmp(c.got.log, c.ref.log, (size_t)c.t.steps * sizeof(int)) == 0,
                  "loop%s: rebuilds at other steps than the stream's (%d vs %d)", half ? " in halves" : "",
                  toy_rebuilds(&c.t, &c.got), toy_rebuilds(&c.t, &c.ref));
        MD_CHECKF(toy_same(&c.t, &c.got, &c.ref), "loop%s: trajectory differs from the stream's", half ? " in halves" : "");
    }
    toy_check_free(&c);
}

int main(void) {
    const char *s = getenv("MD_SANITIZE");
    sanitize = s && s[0] == '1';
    MD_RUN(register_parses_and_refuses);
    MD_RUN(graph_calls_check_arguments);
    MD_RUN(rules_layout_from_param_info);
    MD_RUN(walk_sees_nodes_and_arguments);
    MD_RUN(compare_one_difference_of_each_kind);
    MD_RUN(compare_descends_into_child_graphs);
    MD_RUN(kernel_diff_and_set);
    MD_RUN(timestamps_in_stream_order);
    MD_RUN(cache_counts_updates_and_instantiations);
    MD_RUN(toy_stream_matches_host);
    MD_RUN(captured_step_and_if_node_match_stream);
    MD_RUN(dynamic_arguments_match_stream);
    MD_RUN(while_loop_runs_exactly_n_passes);
    MD_RUN(if_node_taken_as_host_says);
    MD_RUN(while_loop_of_steps_matches_stream);
    return md_test_summary();
}
