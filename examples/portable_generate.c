/* Greedy text generation with a portable program (.lpte) through the C API of
 * loom_portable, without the rest of loom:
 *
 *   loom export --model DIR --format portable --out model.lpte
 *   loom_portable_generate model.lpte N id id id ...
 *
 * prints the program's sizes and timings (stderr), then the N generated token
 * ids, one line (stdout). A program exported with large weights has a sidecar
 * model.lpte.weights next to it, which the library maps read-only. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "loom_portable.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int32_t argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return (int32_t)best;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s PROGRAM.lpte N_NEW PROMPT_ID...\n", argv[0]);
    return 2;
  }
  const double t_load = now_s();
  lp_program* p = lp_program_load(argv[1]);
  if (!p) {
    fprintf(stderr, "error: %s\n", lp_last_error());
    return 1;
  }
  const long n_new = strtol(argv[2], NULL, 10);
  const int64_t n_prompt = argc - 3;
  int32_t* prompt = malloc(sizeof(int32_t) * (size_t)n_prompt);
  for (int64_t i = 0; i < n_prompt; ++i) prompt[i] = (int32_t)strtol(argv[3 + i], NULL, 10);
  const int64_t vocab = lp_program_vocab_size(p);
  float* logits = malloc(sizeof(float) * (size_t)vocab);
  fprintf(stderr, "program: %zu bytes, weights file %zu bytes, arena %zu bytes (%zu without reuse), KV state %zu bytes, "
          "backend %s%s; loaded in %.3f s\n", lp_program_size(p), lp_program_weights_file_size(p), lp_program_arena_bytes(p),
          lp_program_unplanned_bytes(p), lp_program_state_bytes(p), lp_program_backend(p),
          lp_program_is_static(p) ? ", static" : "", now_s() - t_load);
  const double t_prefill = now_s();
  int rc = lp_run(p, prompt, n_prompt, 0, logits);
  const double prefill_s = now_s() - t_prefill;
  int64_t pos = n_prompt;
  const double t_decode = now_s();
  long decoded = 0;
  for (long i = 0; rc == 0 && i < n_new; ++i) {
    int32_t next = argmax(logits, vocab);
    printf(i ? " %d" : "%d", next);
    fflush(stdout);
    if (i + 1 < n_new) {
      rc = lp_run(p, &next, 1, pos++, logits);
      ++decoded;
    }
  }
  printf("\n");
  const double decode_s = now_s() - t_decode;
  fprintf(stderr, "prefill: %lld tokens in %.3f s; decode: %ld steps in %.3f s (%.3f s/token)\n", (long long)n_prompt,
          prefill_s, decoded, decode_s, decoded ? decode_s / (double)decoded : 0.0);
  if (rc != 0) fprintf(stderr, "error: %s\n", lp_error(p));
  free(logits);
  free(prompt);
  lp_free(p);
  return rc == 0 ? 0 : 1;
}
