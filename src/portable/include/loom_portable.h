/* loom_portable: runs a portable program (.lpte) written by `loom export
 * --format portable`. A program holds its weights (inline, or in the sidecar
 * <program>.weights next to it, which is mapped read-only and read in place),
 * a memory plan (one arena, every activation at an offset computed by the
 * exporter) and its own KV cache state; this library depends on nothing of
 * loom (libc, libm, libstdc++).
 *
 * A program is one sequence (batch 1); for a batch, load the file once per
 * sequence (the mapped weights are shared through the page cache, each load
 * has its own arena and KV state). lp_run feeds `n` tokens at positions
 * start_pos .. start_pos + n - 1 (in chunks of at most lp_program_max_tokens),
 * writing their K/V into the state, and returns the logits of the last one;
 * positions before start_pos must have been run before. Not thread-safe per
 * program; separate programs are independent. */
#ifndef LOOM_PORTABLE_H_
#define LOOM_PORTABLE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lp_program lp_program;

/* Loads and validates a program (and its weights file: size, header, that it
 * belongs to this program, every weight's range); NULL on failure (see
 * lp_last_error). */
lp_program* lp_program_load(const char* path);
/* The reason of the calling thread's last failed lp_program_load. */
const char* lp_last_error(void);

/* 0 on success; -1 on bad input or a failed check (see lp_error). logits_out
 * receives lp_program_vocab_size floats. */
int lp_run(lp_program* program, const int32_t* tokens, int64_t n, int64_t start_pos, float* logits_out);
/* Like lp_run, but logits_out receives n * vocab floats: every token's logits. */
int lp_run_all(lp_program* program, const int32_t* tokens, int64_t n, int64_t start_pos, float* logits_out);
/* The reason of the program's last failed run ("" if none). */
const char* lp_error(const lp_program* program);

size_t lp_program_size(const lp_program* program);         /* bytes of the .lpte file */
size_t lp_program_weights_file_size(const lp_program* program); /* bytes of its weights file (0: none) */
/* 1 if the program is static: every chunk runs max_tokens rows (shorter ones padded). */
int lp_program_is_static(const lp_program* program);
/* Recomputes the weights file's payload hash (reads every page) and compares it
 * with the program's: 0 if equal or there is no weights file, -1 if damaged (see lp_error). */
int lp_program_verify_weights(lp_program* program);
size_t lp_program_arena_bytes(const lp_program* program);  /* the planned activation arena */
size_t lp_program_unplanned_bytes(const lp_program* program); /* activations without reuse */
size_t lp_program_state_bytes(const lp_program* program);  /* the KV cache state (K and V) */
int64_t lp_program_vocab_size(const lp_program* program);
int64_t lp_program_max_tokens(const lp_program* program);    /* tokens per chunk */
int64_t lp_program_max_positions(const lp_program* program); /* KV cache length */
const char* lp_program_backend(const lp_program* program);   /* "reference" or "cpu_simd" */

void lp_free(lp_program* program);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_PORTABLE_H_ */
