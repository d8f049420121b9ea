// Host C kernels of the automaton's construction (gxg/compiler/automaton.py): one rule's
// minimal DFA from its Thompson NFA, and the grammar's byte classes.
//
// Built at run time by the system C compiler and loaded with ctypes (gxg/native.py); every
// caller keeps the Python construction as its reference and its fallback (no compiler,
// GXG_NATIVE=0, or a status below that asks for it).
//
// gxg_rule_dfa
//   In:  the NFA of one rule (state 0 starts, state 1 accepts) as flat int32 edge lists:
//        byte edges (source, lo, hi, target), reference edges (source, k, target) where k < R
//        numbers the body's referenced rules by first use, and epsilon edges (source, target);
//        the budget (the most subsets allowed) and the seconds left before the compile's
//        deadline (a negative number: none).
//   Out: a malloc'd int32 buffer (free it with gxg_free), or 0 with status[0] < 0:
//          [0] length of the buffer, [1] states S, [2] moves M, [3] cuts K, [4] subsets,
//          then the K cuts (first byte of each of the rule's byte intervals),
//          then S finality flags, then M moves (state, letter, target);
//        a letter is a byte interval i >= 0 or a reference -(k + 1), as automaton.py numbers
//        them. The DFA is the minimal one of the rule, states numbered breadth-first from the
//        start with each state's moves in increasing letter order (the numbering
//        automaton._minimise gives), moves sorted by (state, letter). "subsets" is the number
//        of states of the subset construction, what the node budget counts.
//        status[0]: RULE_DFA_OK; TOO_MANY (status[1]: the subsets reached, > budget);
//        OUT_OF_TIME (the deadline passed); NOT_TRIM (a reachable subset cannot complete: the
//        Python construction keeps such states, so it runs instead); NO_MEMORY.
//   Work: the subset construction, one pass over each subset's members' edges; closures are
//        computed once per NFA state, subsets are kept sorted and hashed; then Valmari and
//        Lehtinen's partition refinement (O(M log S)), then one breadth-first pass.
//   Invariant: the same DFA, state for state, as automaton._minimise(automaton._determinise())
//        (tests/test_automaton_native.py checks it on random and real rule bodies).
//
// gxg_rule_dfa_program / gxg_program_nfa
//   In:  a rule body as a program (automaton._program of the rule DFA cache's key: operations
//        in pre-order, a blob of literal bytes, a table of class fragments; "rule programs"
//        below), max_nodes, and for gxg_rule_dfa_program gxg_rule_dfa's budget and seconds.
//   Out: gxg_rule_dfa_program: gxg_rule_dfa's buffer for the program's Thompson NFA, and
//        status[2] the NFA's fresh states; gxg_program_nfa: the NFA itself (for the tests).
//        status[0] NFA_TOO_LARGE past max_nodes, BAD_PROGRAM for a program that does not
//        parse (both: the Python construction runs, and raises or builds).
//   Work: one pass that checks the program and sizes each operation, one that places it.
//   Invariant: the NFA of automaton._NfaBuilder.build, edge for edge and in the same order.
//
// gxg_breadth_first
//   In:  a DFA as moves (source, letter, target), int64 [m, 3] in any order.
//   Out: the states reachable from state 0, breadth-first with each state's moves in letter
//        order: the numbering of gxg_rule_dfa, for a DFA built minimal (a bounded run's chain,
//        automaton._bounded_run_dfa).
//   Work: a counting sort of the moves by source, a sort of each state's few moves by letter,
//        one pass.
//
// gxg_byte_classes / gxg_fill_next_node
//   In:  the grammar's byte edges as int64 (node, rule interval, target), each rule interval's
//        range of fine intervals [first, stop) (the fine intervals refine every rule's).
//        Invariant of the input (automaton._flatten's order): a node's edges are contiguous.
//   Out: gxg_byte_classes writes each fine interval's class and returns the number of classes:
//        two fine intervals share a class iff every node moves alike on both (same target, or
//        no move on both); classes are numbered by their first fine interval. A negative
//        return asks for the numpy construction (NO_MEMORY, or the order invariant broken).
//        gxg_fill_next_node writes next_node[node * classes + class] = target for every edge
//        into a table the caller filled with -1.
//   Work: one pass per (edge, fine interval it covers) to list each fine interval's column as
//        (node, target) pairs in edge order, a hash per column, an exact comparison of the
//        columns whose hashes agree; no dense [fine interval, node] table.
#define _POSIX_C_SOURCE 199309L  // clock_gettime under -std=c99
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// The status codes and the rule programs' operations are declared once, in
// gxg/compiler/automaton.py (NATIVE_DEFINES), and reach this file as -D flags of its build.
#ifndef GXG_AUTOMATON_DEFINES
#error "build it with gxg.native.library('automaton_build.c', automaton.NATIVE_DEFINES)"
#endif

void gxg_free(void* pointer) { free(pointer); }

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// ---------------------------------------------------------------------------- growable arrays

typedef struct { int32_t* data; int64_t size, capacity; } IntVec;

static int vec_reserve(IntVec* v, int64_t more) {
  if (v->size + more <= v->capacity) return 1;
  int64_t capacity = v->capacity ? v->capacity : 64;
  while (capacity < v->size + more) capacity *= 2;
  int32_t* grown = (int32_t*)realloc(v->data, (size_t)capacity * sizeof(int32_t));
  if (!grown) return 0;
  v->data = grown;
  v->capacity = capacity;
  return 1;
}

static int vec_push(IntVec* v, int32_t x) {
  if (!vec_reserve(v, 1)) return 0;
  v->data[v->size++] = x;
  return 1;
}

static int vec_push4(IntVec* v, int32_t a, int32_t b, int32_t c, int32_t d) {
  if (!vec_reserve(v, 4)) return 0;
  int32_t* at = v->data + v->size;
  at[0] = a; at[1] = b; at[2] = c; at[3] = d;
  v->size += 4;
  return 1;
}

static int compare_int32(const void* a, const void* b) {
  int32_t x = *(const int32_t*)a, y = *(const int32_t*)b;
  return (x > y) - (x < y);
}

static void sort_ints(int32_t* a, int64_t n) {
  if (n <= 16) {  // insertion sort: most subsets and letter sets are this small
    for (int64_t i = 1; i < n; ++i) {
      int32_t x = a[i];
      int64_t j = i;
      for (; j > 0 && a[j - 1] > x; --j) a[j] = a[j - 1];
      a[j] = x;
    }
  } else {
    qsort(a, (size_t)n, sizeof(int32_t), compare_int32);
  }
}

// Compressed rows: offsets[n + 1] over items grouped by their row, in input order (stable).
static int32_t* csr_offsets(int64_t n, const int32_t* rows, int64_t count, int64_t stride) {
  int32_t* offsets = (int32_t*)calloc((size_t)n + 1, sizeof(int32_t));
  if (!offsets) return 0;
  for (int64_t i = 0; i < count; ++i) ++offsets[rows[i * stride] + 1];
  for (int64_t s = 0; s < n; ++s) offsets[s + 1] += offsets[s];
  return offsets;
}

// slot_of[k]: the input index of the k-th item in row order. 0: out of memory.
static int csr_place(int64_t n, const int32_t* offsets, const int32_t* rows, int64_t count,
                     int64_t stride, int32_t* slot_of) {
  int32_t* next = (int32_t*)malloc((size_t)(n + 1) * sizeof(int32_t));
  if (!next) return 0;
  memcpy(next, offsets, (size_t)(n + 1) * sizeof(int32_t));
  for (int64_t i = 0; i < count; ++i) slot_of[next[rows[i * stride]]++] = (int32_t)i;
  free(next);
  return 1;
}

// ---------------------------------------------------------------------------- subset table

static uint64_t hash_ints(const int32_t* a, int64_t n) {
  uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
  for (int64_t i = 0; i < n; ++i) {
    h ^= (uint64_t)(uint32_t)a[i];
    h *= 1099511628211ULL;
    h ^= h >> 29;
  }
  return h;
}

typedef struct {
  IntVec members;          // every subset's sorted members, one after another
  IntVec offset;           // subset d: members.data[offset[d] .. offset[d + 1])
  int32_t* slots;          // open addressing: subset id + 1, 0 = empty
  uint64_t* slot_hash;
  int64_t num_slots;
  int64_t count;
} SubsetTable;

static int table_rehash(SubsetTable* t, int64_t num_slots) {
  int32_t* slots = (int32_t*)calloc((size_t)num_slots, sizeof(int32_t));
  uint64_t* hashes = (uint64_t*)malloc((size_t)num_slots * sizeof(uint64_t));
  if (!slots || !hashes) { free(slots); free(hashes); return 0; }
  for (int64_t i = 0; i < t->num_slots; ++i) {
    if (!t->slots[i]) continue;
    int64_t j = (int64_t)(t->slot_hash[i] & (uint64_t)(num_slots - 1));
    while (slots[j]) j = (j + 1) & (num_slots - 1);
    slots[j] = t->slots[i];
    hashes[j] = t->slot_hash[i];
  }
  free(t->slots);
  free(t->slot_hash);
  t->slots = slots;
  t->slot_hash = hashes;
  t->num_slots = num_slots;
  return 1;
}

// The id of the subset a[0..n) (sorted), added when new (*added = 1). -1: out of memory.
static int64_t table_find_or_add(SubsetTable* t, const int32_t* a, int64_t n, int* added) {
  *added = 0;
  if (2 * (t->count + 1) > t->num_slots && !table_rehash(t, t->num_slots * 2)) return -1;
  uint64_t h = hash_ints(a, n);
  int64_t j = (int64_t)(h & (uint64_t)(t->num_slots - 1));
  while (t->slots[j]) {
    if (t->slot_hash[j] == h) {
      int64_t d = t->slots[j] - 1;
      int64_t start = t->offset.data[d], length = t->offset.data[d + 1] - start;
      if (length == n && memcmp(t->members.data + start, a, (size_t)n * sizeof(int32_t)) == 0)
        return d;
    }
    j = (j + 1) & (t->num_slots - 1);
  }
  // offsets are int32: a table past 2^31 members is reported as out of memory (the caller
  // then builds in Python, which has no such limit)
  if (t->members.size + n > INT32_MAX) return -1;
  if (!vec_reserve(&t->members, n) || !vec_push(&t->offset, 0)) return -1;
  memcpy(t->members.data + t->members.size, a, (size_t)n * sizeof(int32_t));
  t->members.size += n;
  t->offset.data[t->offset.size - 1] = (int32_t)t->members.size;
  t->slots[j] = (int32_t)(t->count + 1);
  t->slot_hash[j] = h;
  *added = 1;
  return t->count++;
}

// ---------------------------------------------------------------------------- refinable partition

// Valmari and Lehtinen's refinable partition: elements[first[b] .. past[b]) are the members of
// set b, location[e] is e's index in elements, set_of[e] its set; marked[b] counts the marked
// members (moved to the front of b), touched lists the sets with marks.
typedef struct {
  int32_t count;
  int32_t *elements, *location, *set_of, *first, *past, *marked, *touched;
  int32_t num_touched;
} Partition;

static int partition_init(Partition* p, int32_t n) {
  p->count = n > 0;
  p->num_touched = 0;
  size_t size = (size_t)(n > 0 ? n : 1) * sizeof(int32_t);
  p->elements = malloc(size); p->location = malloc(size); p->set_of = malloc(size);
  p->first = malloc(size); p->past = malloc(size); p->marked = calloc((size_t)(n > 0 ? n : 1) + 1,
                                                                      sizeof(int32_t));
  p->touched = malloc(size + sizeof(int32_t));
  if (!p->elements || !p->location || !p->set_of || !p->first || !p->past || !p->marked ||
      !p->touched)
    return 0;
  for (int32_t i = 0; i < n; ++i) { p->elements[i] = p->location[i] = i; p->set_of[i] = 0; }
  if (n > 0) { p->first[0] = 0; p->past[0] = n; }
  return 1;
}

static void partition_free(Partition* p) {
  free(p->elements); free(p->location); free(p->set_of); free(p->first); free(p->past);
  free(p->marked); free(p->touched);
}

static void partition_mark(Partition* p, int32_t e) {
  int32_t s = p->set_of[e], i = p->location[e], j = p->first[s] + p->marked[s];
  p->elements[i] = p->elements[j];
  p->location[p->elements[i]] = i;
  p->elements[j] = e;
  p->location[e] = j;
  if (!p->marked[s]++) p->touched[p->num_touched++] = s;
}

// Every touched set with unmarked members too splits: the smaller part becomes a new set.
static void partition_split(Partition* p) {
  while (p->num_touched) {
    int32_t s = p->touched[--p->num_touched], j = p->first[s] + p->marked[s];
    if (j == p->past[s]) { p->marked[s] = 0; continue; }
    int32_t z = p->count;
    if (p->marked[s] <= p->past[s] - j) {
      p->first[z] = p->first[s]; p->past[z] = p->first[s] = j;
    } else {
      p->past[z] = p->past[s]; p->first[z] = p->past[s] = j;
    }
    for (int32_t i = p->first[z]; i < p->past[z]; ++i) p->set_of[p->elements[i]] = z;
    p->marked[s] = p->marked[z] = 0;
    ++p->count;
  }
}

// ---------------------------------------------------------------------------- gxg_rule_dfa

typedef struct {
  // the NFA in rows per state
  int32_t num_states, num_refs, num_letters, num_cuts;
  int32_t cuts[257];
  int32_t *byte_offsets, *byte_first, *byte_stop, *byte_target;  // intervals [first, stop)
  int32_t *ref_offsets, *ref_letter, *ref_target;
  int32_t *eps_offsets, *eps_target;
  // closures, computed once per state: closure_at[s] = -1 until then
  int32_t* closure_at;
  IntVec closures;  // per computed state: length, then members (sorted)
  int32_t* stamp;   // per NFA state, for de-duplication
  int32_t stamp_now;
} Nfa;

static void nfa_free(Nfa* a) {
  free(a->byte_offsets); free(a->byte_first); free(a->byte_stop); free(a->byte_target);
  free(a->ref_offsets); free(a->ref_letter); free(a->ref_target);
  free(a->eps_offsets); free(a->eps_target);
  free(a->closure_at); free(a->closures.data); free(a->stamp);
}

static int nfa_init(Nfa* a, int32_t num_states, const int32_t* byte_edges, int64_t num_byte,
                    const int32_t* ref_edges, int64_t num_ref, int32_t num_refs,
                    const int32_t* eps_edges, int64_t num_eps) {
  memset(a, 0, sizeof(*a));
  a->num_states = num_states;
  a->num_refs = num_refs;
  uint8_t is_cut[257] = {0};
  is_cut[0] = 1;
  for (int64_t i = 0; i < num_byte; ++i) {
    is_cut[byte_edges[4 * i + 1]] = 1;
    is_cut[byte_edges[4 * i + 2] + 1] = 1;
  }
  int32_t interval_of[257];
  int32_t k = 0;
  for (int32_t b = 0; b < 256; ++b)
    if (is_cut[b]) { a->cuts[k] = b; interval_of[b] = k++; }
  interval_of[256] = k;
  a->num_cuts = k;
  // letters: reference k -> num_refs - 1 - k, interval i -> num_refs + i (letter order)
  a->num_letters = num_refs + k;
  int32_t* slot = (int32_t*)malloc((size_t)(num_byte + num_ref + num_eps + 1) * sizeof(int32_t));
  a->byte_offsets = csr_offsets(num_states, byte_edges, num_byte, 4);
  a->ref_offsets = csr_offsets(num_states, ref_edges, num_ref, 3);
  a->eps_offsets = csr_offsets(num_states, eps_edges, num_eps, 2);
  a->byte_first = malloc((size_t)(num_byte + 1) * sizeof(int32_t));
  a->byte_stop = malloc((size_t)(num_byte + 1) * sizeof(int32_t));
  a->byte_target = malloc((size_t)(num_byte + 1) * sizeof(int32_t));
  a->ref_letter = malloc((size_t)(num_ref + 1) * sizeof(int32_t));
  a->ref_target = malloc((size_t)(num_ref + 1) * sizeof(int32_t));
  a->eps_target = malloc((size_t)(num_eps + 1) * sizeof(int32_t));
  a->closure_at = malloc((size_t)num_states * sizeof(int32_t));
  a->stamp = calloc((size_t)num_states, sizeof(int32_t));
  if (!slot || !a->byte_offsets || !a->ref_offsets || !a->eps_offsets || !a->byte_first ||
      !a->byte_stop || !a->byte_target || !a->ref_letter || !a->ref_target || !a->eps_target ||
      !a->closure_at || !a->stamp) {
    free(slot);
    return 0;
  }
  if (!csr_place(num_states, a->byte_offsets, byte_edges, num_byte, 4, slot)) {
    free(slot);
    return 0;
  }
  for (int64_t i = 0; i < num_byte; ++i) {
    const int32_t* e = byte_edges + 4 * slot[i];
    a->byte_first[i] = num_refs + interval_of[e[1]];
    a->byte_stop[i] = num_refs + interval_of[e[2] + 1];
    a->byte_target[i] = e[3];
  }
  if (!csr_place(num_states, a->ref_offsets, ref_edges, num_ref, 3, slot)) { free(slot); return 0; }
  for (int64_t i = 0; i < num_ref; ++i) {
    const int32_t* e = ref_edges + 3 * slot[i];
    a->ref_letter[i] = num_refs - 1 - e[1];
    a->ref_target[i] = e[2];
  }
  if (!csr_place(num_states, a->eps_offsets, eps_edges, num_eps, 2, slot)) { free(slot); return 0; }
  for (int64_t i = 0; i < num_eps; ++i) a->eps_target[i] = eps_edges[2 * slot[i] + 1];
  free(slot);
  for (int32_t s = 0; s < num_states; ++s) a->closure_at[s] = -1;
  return 1;
}

// The epsilon closure of NFA state s: a pointer to (length, members...), computed once.
static const int32_t* closure_of(Nfa* a, int32_t s, IntVec* stack) {
  if (a->closure_at[s] < 0) {
    int64_t at = a->closures.size;
    if (!vec_push(&a->closures, 0)) return 0;
    ++a->stamp_now;
    stack->size = 0;
    if (!vec_push(stack, s)) return 0;
    a->stamp[s] = a->stamp_now;
    int32_t length = 0;
    while (stack->size) {
      int32_t x = stack->data[--stack->size];
      if (!vec_push(&a->closures, x)) return 0;
      ++length;
      for (int32_t i = a->eps_offsets[x]; i < a->eps_offsets[x + 1]; ++i) {
        int32_t y = a->eps_target[i];
        if (a->stamp[y] != a->stamp_now) {
          a->stamp[y] = a->stamp_now;
          if (!vec_push(stack, y)) return 0;
        }
      }
    }
    a->closures.data[at] = length;
    sort_ints(a->closures.data + at + 1, length);
    if (at > INT32_MAX) return 0;  // closure_at is int32: reported as out of memory
    a->closure_at[s] = (int32_t)at;
  }
  return a->closures.data + a->closure_at[s];
}

// The trimmed DFA's minimal partition (Valmari and Lehtinen 2008/2012): blocks of states
// (block_of) after splitting by finality and by every cord (the moves of one letter into one
// block). Requires every state reachable and able to reach a final state. in_offsets and
// incoming: each state's incoming moves (incoming[in_offsets[q] .. in_offsets[q + 1])).
static int32_t* minimal_blocks(int32_t n, int64_t m, const int32_t* tail, const int32_t* label,
                               const int32_t* in_offsets, const int32_t* incoming,
                               const int32_t* final, int32_t* num_blocks) {
  Partition blocks, cords;
  int32_t* block_of = 0;
  if (!partition_init(&blocks, n) || !partition_init(&cords, (int32_t)m)) goto done;
  for (int32_t q = 0; q < n; ++q)
    if (final[q]) partition_mark(&blocks, q);
  partition_split(&blocks);
  if (m > 0) {  // cords: the moves grouped by letter
    int32_t* by_label = cords.elements;
    for (int64_t t = 0; t < m; ++t) by_label[t] = (int32_t)t;
    // counting sort by letter (labels are small)
    int32_t max_label = 0;
    for (int64_t t = 0; t < m; ++t) if (label[t] > max_label) max_label = label[t];
    int32_t* count = (int32_t*)calloc((size_t)max_label + 2, sizeof(int32_t));
    if (!count) goto done;
    for (int64_t t = 0; t < m; ++t) ++count[label[t] + 1];
    for (int32_t l = 0; l <= max_label; ++l) count[l + 1] += count[l];
    for (int64_t t = 0; t < m; ++t) by_label[count[label[t]]++] = (int32_t)t;
    free(count);
    cords.count = 0;
    int32_t current = label[by_label[0]];
    cords.first[0] = 0;
    for (int64_t i = 0; i < m; ++i) {
      int32_t t = by_label[i];
      if (label[t] != current) {
        current = label[t];
        cords.past[cords.count++] = (int32_t)i;
        cords.first[cords.count] = (int32_t)i;
      }
      cords.set_of[t] = cords.count;
      cords.location[t] = (int32_t)i;
    }
    cords.past[cords.count++] = (int32_t)m;
  }
  {
    int32_t b = 1, c = 0;
    while (c < cords.count) {
      for (int32_t i = cords.first[c]; i < cords.past[c]; ++i)
        partition_mark(&blocks, tail[cords.elements[i]]);
      partition_split(&blocks);
      ++c;
      while (b < blocks.count) {
        for (int32_t i = blocks.first[b]; i < blocks.past[b]; ++i) {
          int32_t q = blocks.elements[i];
          for (int32_t j = in_offsets[q]; j < in_offsets[q + 1]; ++j)
            partition_mark(&cords, incoming[j]);
        }
        partition_split(&cords);
        ++b;
      }
    }
  }
  block_of = (int32_t*)malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
  if (block_of) {
    memcpy(block_of, blocks.set_of, (size_t)n * sizeof(int32_t));
    *num_blocks = blocks.count;
  }
done:
  partition_free(&blocks);
  partition_free(&cords);
  return block_of;
}

int32_t* gxg_rule_dfa(int32_t num_states, const int32_t* byte_edges, int64_t num_byte,
                      const int32_t* ref_edges, int64_t num_ref, int32_t num_refs,
                      const int32_t* eps_edges, int64_t num_eps, int64_t budget,
                      double seconds_left, int64_t* status) {
  double deadline = seconds_left >= 0 ? now_seconds() + seconds_left : -1.0;
  Nfa a;
  SubsetTable table;
  memset(&table, 0, sizeof(table));
  IntVec stack = {0}, scratch = {0}, pairs = {0}, touched = {0};
  IntVec tail = {0}, label = {0}, head = {0};
  IntVec finals = {0};
  int32_t* head_of_letter = 0;
  int32_t* result = 0;
  int32_t* block_of = 0;
  int32_t* in_offsets = 0;  // the DFA's moves by their target: the trim check and minimal_blocks
  int32_t* incoming = 0;
  status[0] = NO_MEMORY;
  status[1] = 0;
  if (!nfa_init(&a, num_states, byte_edges, num_byte, ref_edges, num_ref, num_refs, eps_edges,
                num_eps))
    goto done;
  head_of_letter = (int32_t*)malloc((size_t)(a.num_letters + 1) * sizeof(int32_t));
  if (!head_of_letter || !table_rehash(&table, 64) || !vec_push(&table.offset, 0)) goto done;
  for (int32_t l = 0; l < a.num_letters; ++l) head_of_letter[l] = -1;

  // the subset construction: subset d's moves go to (tail, label, head) in letter order
  {
    const int32_t* start = closure_of(&a, 0, &stack);
    int added;
    if (!start || table_find_or_add(&table, start + 1, start[0], &added) < 0) goto done;
    for (int64_t d = 0; d < table.count; ++d) {
      if ((d & 1023) == 1023 && deadline >= 0 && now_seconds() > deadline) {
        status[0] = OUT_OF_TIME;
        goto done;
      }
      int32_t from = table.offset.data[d], to = table.offset.data[d + 1];
      int final = 0;
      // (letter, target) pairs as linked lists per letter: pairs = (target, next)*
      pairs.size = 0;
      touched.size = 0;
      for (int32_t i = from; i < to; ++i) {
        int32_t s = table.members.data[i];
        if (s == 1) final = 1;
        for (int32_t e = a.byte_offsets[s]; e < a.byte_offsets[s + 1]; ++e) {
          for (int32_t l = a.byte_first[e]; l < a.byte_stop[e]; ++l) {
            if (head_of_letter[l] < 0 && !vec_push(&touched, l)) goto done;
            if (!vec_push(&pairs, a.byte_target[e]) || !vec_push(&pairs, head_of_letter[l]))
              goto done;
            head_of_letter[l] = (int32_t)(pairs.size / 2 - 1);
          }
        }
        for (int32_t e = a.ref_offsets[s]; e < a.ref_offsets[s + 1]; ++e) {
          int32_t l = a.ref_letter[e];
          if (head_of_letter[l] < 0 && !vec_push(&touched, l)) goto done;
          if (!vec_push(&pairs, a.ref_target[e]) || !vec_push(&pairs, head_of_letter[l]))
            goto done;
          head_of_letter[l] = (int32_t)(pairs.size / 2 - 1);
        }
      }
      if (!vec_push(&finals, final)) goto done;
      sort_ints(touched.data, touched.size);
      for (int64_t t = 0; t < touched.size; ++t) {
        int32_t l = touched.data[t];
        // the union of the targets' closures, sorted
        ++a.stamp_now;
        int32_t stamp = a.stamp_now;
        scratch.size = 0;
        for (int32_t p = head_of_letter[l]; p >= 0; p = pairs.data[2 * p + 1]) {
          const int32_t* closed = closure_of(&a, pairs.data[2 * p], &stack);
          if (!closed) goto done;
          if (a.stamp_now != stamp) {  // closure_of used new stamps: refresh the marks
            ++a.stamp_now;
            stamp = a.stamp_now;
            for (int64_t k = 0; k < scratch.size; ++k) a.stamp[scratch.data[k]] = stamp;
          }
          for (int32_t k = 1; k <= closed[0]; ++k) {
            int32_t x = closed[k];
            if (a.stamp[x] != stamp) {
              a.stamp[x] = stamp;
              if (!vec_push(&scratch, x)) goto done;
            }
          }
        }
        head_of_letter[l] = -1;
        sort_ints(scratch.data, scratch.size);
        int64_t target = table_find_or_add(&table, scratch.data, scratch.size, &added);
        if (target < 0) goto done;
        if (added && table.count > budget) {
          status[0] = TOO_MANY;
          status[1] = table.count;
          goto done;
        }
        if (!vec_push(&tail, (int32_t)d) || !vec_push(&label, l) ||
            !vec_push(&head, (int32_t)target))
          goto done;
      }
    }
  }
  int32_t n = (int32_t)table.count;
  int64_t m = tail.size;
  in_offsets = csr_offsets(n, head.data, m, 1);
  incoming = (int32_t*)malloc((size_t)(m + 1) * sizeof(int32_t));
  if (!in_offsets || !incoming || !csr_place(n, in_offsets, head.data, m, 1, incoming)) goto done;
  // trim check: every subset must reach a final one (else the Python construction runs)
  {
    uint8_t* alive = (uint8_t*)calloc((size_t)n, 1);
    int32_t* work = (int32_t*)malloc((size_t)n * sizeof(int32_t));
    int ok = alive && work;
    int32_t reached = 0;
    if (ok) {
      int32_t top = 0;
      for (int32_t q = 0; q < n; ++q)
        if (finals.data[q]) { alive[q] = 1; work[top++] = q; ++reached; }
      while (top) {
        int32_t q = work[--top];
        for (int32_t j = in_offsets[q]; j < in_offsets[q + 1]; ++j) {
          int32_t p = tail.data[incoming[j]];
          if (!alive[p]) { alive[p] = 1; work[top++] = p; ++reached; }
        }
      }
    }
    free(alive); free(work);
    if (!ok) goto done;
    if (reached != n) { status[0] = NOT_TRIM; goto done; }
  }
  int32_t num_blocks = 0;
  block_of = minimal_blocks(n, m, tail.data, label.data, in_offsets, incoming, finals.data,
                            &num_blocks);
  if (!block_of) goto done;
  // the quotient, numbered breadth-first with moves in letter order; a block's moves are its
  // first member's (moves of subset d are tail[move_at[d] .. move_at[d + 1]), in letter order)
  {
    int32_t* move_at = (int32_t*)calloc((size_t)n + 1, sizeof(int32_t));
    int32_t* number = (int32_t*)malloc((size_t)num_blocks * sizeof(int32_t));
    int32_t* member = (int32_t*)malloc((size_t)num_blocks * sizeof(int32_t));
    if (!move_at || !number || !member) { free(move_at); free(number); free(member); goto done; }
    for (int64_t t = 0; t < m; ++t) ++move_at[tail.data[t] + 1];
    for (int32_t q = 0; q < n; ++q) move_at[q + 1] += move_at[q];
    for (int32_t b = 0; b < num_blocks; ++b) number[b] = -1;
    int32_t count = 0;
    number[block_of[0]] = count;
    member[count++] = 0;
    int64_t num_moves = 0;
    for (int32_t i = 0; i < count; ++i) {  // grows while iterating
      int32_t q = member[i];
      for (int32_t t = move_at[q]; t < move_at[q + 1]; ++t) {
        int32_t b = block_of[head.data[t]];
        if (number[b] < 0) { number[b] = count; member[count++] = head.data[t]; }
        ++num_moves;
      }
    }
    int64_t length = 5 + a.num_cuts + count + 3 * num_moves;
    if (length > INT32_MAX) { free(move_at); free(number); free(member); goto done; }
    result = (int32_t*)malloc((size_t)length * sizeof(int32_t));
    if (!result) { free(move_at); free(number); free(member); goto done; }
    result[0] = (int32_t)length;
    result[1] = count;
    result[2] = (int32_t)num_moves;
    result[3] = a.num_cuts;
    result[4] = n;
    int32_t* out = result + 5;
    for (int32_t k = 0; k < a.num_cuts; ++k) *out++ = a.cuts[k];
    for (int32_t i = 0; i < count; ++i) *out++ = finals.data[member[i]];
    for (int32_t i = 0; i < count; ++i) {
      int32_t q = member[i];
      for (int32_t t = move_at[q]; t < move_at[q + 1]; ++t) {
        *out++ = i;
        *out++ = label.data[t] - a.num_refs;  // automaton.py's letter
        *out++ = number[block_of[head.data[t]]];
      }
    }
    free(move_at); free(number); free(member);
    status[0] = RULE_DFA_OK;
    status[1] = n;
  }
done:
  nfa_free(&a);
  free(table.members.data); free(table.offset.data); free(table.slots); free(table.slot_hash);
  free(stack.data); free(scratch.data); free(pairs.data); free(touched.data);
  free(tail.data); free(label.data); free(head.data); free(finals.data);
  free(head_of_letter); free(block_of); free(in_offsets); free(incoming);
  return result;
}

// ---------------------------------------------------------------------------- gxg_breadth_first

// The states reachable from state 0 of a DFA given as moves int64 [m, 3] (source, letter,
// target), breadth-first with each state's moves in increasing letter order (the numbering
// gxg_rule_dfa gives): order[0 .. return value). A negative return: NO_MEMORY.
int64_t gxg_breadth_first(int64_t num_states, int64_t num_moves, const int64_t* moves,
                          int64_t* order) {
  int64_t* offsets = (int64_t*)calloc((size_t)num_states + 1, sizeof(int64_t));
  int64_t* sorted = (int64_t*)malloc((size_t)(num_moves > 0 ? num_moves : 1) * sizeof(int64_t));
  uint8_t* seen = (uint8_t*)calloc((size_t)(num_states > 0 ? num_states : 1), 1);
  if (!offsets || !sorted || !seen) { free(offsets); free(sorted); free(seen); return NO_MEMORY; }
  for (int64_t t = 0; t < num_moves; ++t) ++offsets[moves[3 * t] + 1];
  for (int64_t q = 0; q < num_states; ++q) offsets[q + 1] += offsets[q];
  for (int64_t t = 0; t < num_moves; ++t) sorted[--offsets[moves[3 * t] + 1]] = t;
  // (offsets[q + 1] now starts q's moves again, which were placed from the back; order them by
  // letter: insertion sort, a state has few moves)
  for (int64_t q = 0; q < num_states; ++q) {
    int64_t from = offsets[q + 1], to = q + 2 <= num_states ? offsets[q + 2] : num_moves;
    for (int64_t i = from + 1; i < to; ++i) {
      int64_t x = sorted[i], j = i;
      for (; j > from && moves[3 * sorted[j - 1] + 1] > moves[3 * x + 1]; --j)
        sorted[j] = sorted[j - 1];
      sorted[j] = x;
    }
  }
  int64_t count = 0;
  if (num_states > 0) { order[count++] = 0; seen[0] = 1; }
  for (int64_t i = 0; i < count; ++i) {
    int64_t q = order[i];
    int64_t from = offsets[q + 1], to = q + 2 <= num_states ? offsets[q + 2] : num_moves;
    for (int64_t k = from; k < to; ++k) {
      int64_t target = moves[3 * sorted[k] + 2];
      if (!seen[target]) { seen[target] = 1; order[count++] = target; }
    }
  }
  free(offsets); free(sorted); free(seen);
  return count;
}

// ---------------------------------------------------------------------------- byte classes

int64_t gxg_byte_classes(int64_t num_edges, const int64_t* edges, const int64_t* interval_first,
                         const int64_t* interval_stop, int64_t num_fine, int64_t* fine_class) {
  int64_t* count = (int64_t*)calloc((size_t)num_fine + 1, sizeof(int64_t));
  if (!count) return NO_MEMORY;
  int64_t previous = -1;
  for (int64_t i = 0; i < num_edges; ++i) {
    const int64_t* e = edges + 3 * i;
    if (e[0] < previous) { free(count); return NOT_CONTIGUOUS; }
    previous = e[0];
    ++count[interval_first[e[1]]];
    --count[interval_stop[e[1]]];
  }
  // count[f]: the edges covering fine interval f; offsets of each column's pairs
  int64_t* offset = (int64_t*)malloc((size_t)(num_fine + 1) * sizeof(int64_t));
  if (!offset) { free(count); return NO_MEMORY; }
  int64_t covering = 0, total = 0;
  for (int64_t f = 0; f < num_fine; ++f) {
    covering += count[f];
    offset[f] = total;
    total += covering;
  }
  offset[num_fine] = total;
  int64_t* column = (int64_t*)malloc((size_t)(total > 0 ? total : 1) * sizeof(int64_t));
  int64_t* fill = count;  // reused: the next free slot of each column
  if (!column) { free(count); free(offset); return NO_MEMORY; }
  memcpy(fill, offset, (size_t)num_fine * sizeof(int64_t));
  for (int64_t i = 0; i < num_edges; ++i) {
    const int64_t* e = edges + 3 * i;
    int64_t pair = (e[0] << 32) | (e[2] & 0xFFFFFFFF);  // (node, target), both < 2^31
    for (int64_t f = interval_first[e[1]]; f < interval_stop[e[1]]; ++f) column[fill[f]++] = pair;
  }
  // a node's edges are contiguous and cover a fine interval at most once: equal columns list
  // their pairs in the same order
  uint64_t* hashes = (uint64_t*)malloc((size_t)(num_fine > 0 ? num_fine : 1) * sizeof(uint64_t));
  int64_t* class_first = (int64_t*)malloc((size_t)(num_fine > 0 ? num_fine : 1) * sizeof(int64_t));
  if (!hashes || !class_first) {
    free(count); free(offset); free(column); free(hashes); free(class_first);
    return NO_MEMORY;
  }
  int64_t classes = 0;
  for (int64_t f = 0; f < num_fine; ++f) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)(offset[f + 1] - offset[f]);
    for (int64_t k = offset[f]; k < offset[f + 1]; ++k) {
      h ^= (uint64_t)column[k];
      h *= 1099511628211ULL;
      h ^= h >> 29;
    }
    hashes[f] = h;
    int64_t found = -1;
    for (int64_t c = 0; c < classes && found < 0; ++c) {
      int64_t g = class_first[c];
      if (hashes[g] == h && offset[g + 1] - offset[g] == offset[f + 1] - offset[f] &&
          memcmp(column + offset[g], column + offset[f],
                 (size_t)(offset[f + 1] - offset[f]) * sizeof(int64_t)) == 0)
        found = c;
    }
    if (found < 0) { found = classes; class_first[classes++] = f; }
    fine_class[f] = found;
  }
  free(count); free(offset); free(column); free(hashes); free(class_first);
  return classes;
}

void gxg_fill_next_node(int64_t num_edges, const int64_t* edges, const int64_t* interval_first,
                        const int64_t* interval_stop, const int64_t* fine_class,
                        int64_t num_classes, int32_t* next_node) {
  for (int64_t i = 0; i < num_edges; ++i) {
    const int64_t* e = edges + 3 * i;
    int32_t* row = next_node + e[0] * num_classes;
    for (int64_t f = interval_first[e[1]]; f < interval_stop[e[1]]; ++f)
      row[fine_class[f]] = (int32_t)e[2];
  }
}

// ---------------------------------------------------------------------------- rule programs

// A rule body as automaton._program writes it (from the rule DFA cache's key): its expressions
// in pre-order, each an operation OP_* of OP_*_WIDTH ints (the codes come from
// automaton.PROGRAM_OPS, passed to the build as -D defines):
//   LITERAL offset length   bytes blob[offset .. offset + length) (length 0: the empty string)
//   CLASS index             a character class: its fragment at classes + class_at[index]:
//                           inner states I, edges E, then E edges (origin, lo, hi, destination)
//                           where 0 is the entry, 1 the exit, 2 .. I + 1 the inner states
//   REF k                   the body's k-th referenced rule (first-use numbering), k < R
//   SEQUENCE n / CHOICE n   n >= 1 operands follow
//   REPEAT min max          max = -1: unbounded; max >= 1; one operand follows
//   BACK pc                 the operand that starts at pc again (a shared subexpression)
typedef struct {
  const int32_t* code;
  int64_t length;
  const uint8_t* blob;
  int64_t blob_length;
  const int32_t* classes;
  int64_t classes_length;
  const int64_t* class_at;
  int64_t num_classes;
  int32_t num_refs;
} Program;

// Whether every class's fragment lies inside the table and its edges join its own states.
static int fragments_valid(const Program* p) {
  for (int64_t k = 0; k < p->num_classes; ++k) {
    int64_t at = p->class_at[k];
    if (at < 0 || at + 2 > p->classes_length) return 0;
    const int32_t* fragment = p->classes + at;
    if (fragment[0] < 0 || fragment[1] < 0 || at + 2 + 4 * (int64_t)fragment[1] > p->classes_length)
      return 0;
    for (int32_t e = 0; e < fragment[1]; ++e) {
      const int32_t* edge = fragment + 2 + 4 * e;
      if (edge[0] < 0 || edge[0] > fragment[0] + 1 || edge[3] < 0 || edge[3] > fragment[0] + 1 ||
          edge[1] < 0 || edge[1] > edge[2] || edge[2] > 255)
        return 0;
    }
  }
  return 1;
}

static int64_t capped(int64_t x, int64_t cap) { return x > cap ? cap : x; }

// Checks the program and writes, at each operation's pc, where it ends and the fresh NFA states
// its placement creates (automaton._NfaBuilder.size_of, capped at cap). Returns the body's size,
// or BAD_PROGRAM.
static int64_t program_scan(const Program* p, int64_t* end, int64_t* size, int64_t cap) {
  typedef struct { int64_t pc, left, sum; } Open;  // a compound operation and its operands
  const int32_t* code = p->code;
  int64_t result = BAD_PROGRAM;
  Open* open = (Open*)malloc((size_t)(p->length / 2 + 1) * sizeof(Open));
  int64_t depth = 0, pc = 0;
  if (!open) return NO_MEMORY;
  if (!fragments_valid(p)) { free(open); return BAD_PROGRAM; }
  for (int64_t i = 0; i < p->length; ++i) end[i] = 0;
  while (pc < p->length) {
    int32_t op = code[pc];
    int64_t width, own;
    if (op == OP_SEQUENCE || op == OP_CHOICE) {
      if (pc + OP_SEQUENCE_WIDTH > p->length || code[pc + 1] < 1) goto done;
      open[depth].pc = pc; open[depth].left = code[pc + 1]; open[depth].sum = 0; ++depth;
      pc += OP_SEQUENCE_WIDTH;
      continue;
    }
    if (op == OP_REPEAT) {
      if (pc + OP_REPEAT_WIDTH > p->length || code[pc + 1] < 0 ||
          !(code[pc + 2] == -1 || (code[pc + 2] >= 1 && code[pc + 2] >= code[pc + 1])))
        goto done;
      open[depth].pc = pc; open[depth].left = 1; open[depth].sum = 0; ++depth;
      pc += OP_REPEAT_WIDTH;
      continue;
    }
    if (op == OP_LITERAL) {
      width = OP_LITERAL_WIDTH;
      if (pc + width > p->length || code[pc + 1] < 0 || code[pc + 2] < 0 ||
          (int64_t)code[pc + 1] + code[pc + 2] > p->blob_length)
        goto done;
      own = code[pc + 2] > 0 ? code[pc + 2] - 1 : 0;
    } else if (op == OP_CLASS) {
      width = OP_CLASS_WIDTH;
      if (pc + width > p->length || code[pc + 1] < 0 || code[pc + 1] >= p->num_classes) goto done;
      own = p->classes[p->class_at[code[pc + 1]]];
    } else if (op == OP_REF) {
      width = OP_REF_WIDTH;
      if (pc + width > p->length || code[pc + 1] < 0 || code[pc + 1] >= p->num_refs) goto done;
      own = 0;
    } else if (op == OP_BACK) {
      width = OP_BACK_WIDTH;
      // an operand met before, and complete: its end is set and lies before this pc
      if (pc + width > p->length || code[pc + 1] < 0 || code[pc + 1] >= pc ||
          end[code[pc + 1]] <= 0 || end[code[pc + 1]] > pc || code[code[pc + 1]] == OP_BACK)
        goto done;
      own = size[code[pc + 1]];
    } else {
      goto done;
    }
    end[pc] = pc + width;
    size[pc] = own;
    pc += width;
    // the operation is complete: so are the compound operations it completes
    while (depth > 0) {
      Open* o = &open[depth - 1];
      o->sum = capped(o->sum + own, cap);
      if (--o->left > 0) break;
      const int32_t* c = code + o->pc;
      if (c[0] == OP_SEQUENCE) {
        own = capped(c[1] - 1 + o->sum, cap);
      } else if (c[0] == OP_CHOICE) {
        own = o->sum;
      } else if (c[2] < 0) {  // min + 2 + (min + 1) * body, as automaton._NfaBuilder._own_size
        own = capped((int64_t)c[1] + 2 + ((int64_t)c[1] + 1) * o->sum, cap);
      } else {
        own = capped((int64_t)c[2] - 1 + (int64_t)c[2] * o->sum, cap);
      }
      end[o->pc] = pc;
      size[o->pc] = own;
      --depth;
    }
    if (depth == 0) {
      if (pc == p->length) result = own;
      goto done;  // one operand makes the whole program
    }
  }
done:
  free(open);
  return result;
}

// The Thompson NFA of a scanned program, edge for edge what automaton._NfaBuilder.build adds
// (the same placements in the same order: a stack of (pc, source, target)).
static int program_place(const Program* p, const int64_t* end, IntVec* byte, IntVec* ref,
                         IntVec* eps, int32_t* num_states) {
  IntVec todo = {0};
  int32_t n = 2;
  int ok = vec_push(&todo, 0) && vec_push(&todo, 0) && vec_push(&todo, 1);
  while (ok && todo.size > 0) {
    todo.size -= 3;
    int64_t pc = todo.data[todo.size];
    int32_t source = todo.data[todo.size + 1], target = todo.data[todo.size + 2];
    const int32_t* c = p->code + pc;
    if (c[0] == OP_BACK) { pc = c[1]; c = p->code + pc; }
    if (c[0] == OP_LITERAL) {
      if (c[2] == 0) { ok = vec_push(eps, source) && vec_push(eps, target); continue; }
      int32_t state = source;
      for (int32_t i = 0; ok && i < c[2]; ++i) {
        int32_t following = i == c[2] - 1 ? target : n++;
        int32_t b = p->blob[c[1] + i];
        ok = vec_push4(byte, state, b, b, following);
        state = following;
      }
    } else if (c[0] == OP_CLASS) {
      const int32_t* fragment = p->classes + p->class_at[c[1]];
      int32_t first_inner = n;
      n += fragment[0];
      for (int32_t e = 0; ok && e < fragment[1]; ++e) {
        const int32_t* edge = fragment + 2 + 4 * e;
        int32_t from = edge[0] == 0 ? source : edge[0] == 1 ? target : first_inner + edge[0] - 2;
        int32_t to = edge[3] == 0 ? source : edge[3] == 1 ? target : first_inner + edge[3] - 2;
        ok = vec_push4(byte, from, edge[1], edge[2], to);
      }
    } else if (c[0] == OP_REF) {
      ok = vec_push(ref, source) && vec_push(ref, c[1]) && vec_push(ref, target);
    } else if (c[0] == OP_SEQUENCE || c[0] == OP_CHOICE) {
      int64_t operand = pc + OP_SEQUENCE_WIDTH;
      int32_t state = source;
      for (int32_t i = 0; ok && i < c[1]; ++i) {
        int32_t following = c[0] == OP_CHOICE ? target : i == c[1] - 1 ? target : n++;
        ok = vec_reserve(&todo, 3);
        if (ok) {
          todo.data[todo.size++] = (int32_t)operand;
          todo.data[todo.size++] = c[0] == OP_CHOICE ? source : state;
          todo.data[todo.size++] = following;
        }
        state = following;
        operand = end[operand];
      }
    } else {  // OP_REPEAT, as automaton._NfaBuilder._place_repeat
      int32_t body = (int32_t)(pc + OP_REPEAT_WIDTH), low = c[1], high = c[2];
      int32_t state = source;
      if (high < 0) {
        for (int32_t i = 0; ok && i < low; ++i) {
          int32_t following = n++;
          ok = vec_push(&todo, body) && vec_push(&todo, state) && vec_push(&todo, following);
          state = following;
        }
        int32_t entry = n++, back = n++;
        ok = ok && vec_push(eps, state) && vec_push(eps, entry) && vec_push(eps, back) &&
             vec_push(eps, entry) && vec_push(eps, entry) && vec_push(eps, target) &&
             vec_push(&todo, body) && vec_push(&todo, entry) && vec_push(&todo, back);
      } else {
        for (int32_t index = 1; ok && index <= high; ++index) {
          int32_t following = index == high ? target : n++;
          ok = vec_push(&todo, body) && vec_push(&todo, state) && vec_push(&todo, following);
          if (ok && index - 1 >= low) ok = vec_push(eps, state) && vec_push(eps, target);
          state = following;
        }
      }
    }
  }
  free(todo.data);
  *num_states = n;
  return ok;
}

// The NFA of a program, checked against max_nodes: RULE_DFA_OK, NFA_TOO_LARGE (more than
// max_nodes fresh states: automaton._NfaBuilder raises its message), BAD_PROGRAM, NO_MEMORY.
static int program_nfa(const Program* p, int64_t max_nodes, IntVec* byte, IntVec* ref,
                       IntVec* eps, int32_t* num_states) {
  int64_t* end = (int64_t*)malloc((size_t)(p->length > 0 ? p->length : 1) * sizeof(int64_t));
  int64_t* size = (int64_t*)malloc((size_t)(p->length > 0 ? p->length : 1) * sizeof(int64_t));
  int result = NO_MEMORY;
  if (end && size && max_nodes >= 0 && max_nodes < INT32_MAX - 2) {
    int64_t total = program_scan(p, end, size, max_nodes + 1);
    if (total < 0) result = (int)total;
    else if (total > max_nodes) result = NFA_TOO_LARGE;
    else if (program_place(p, end, byte, ref, eps, num_states)) result = RULE_DFA_OK;
  }
  free(end);
  free(size);
  return result;
}

// gxg_program_nfa: the NFA alone (tests compare it with automaton._NfaBuilder's): a malloc'd
// int32 buffer [length, states, byte edges B, reference edges F, epsilon edges P, then 4B, 3F
// and 2P ints], or 0 with status[0] < 0.
int32_t* gxg_program_nfa(const int32_t* code, int64_t length, const uint8_t* blob,
                         int64_t blob_length, const int32_t* classes, int64_t classes_length,
                         const int64_t* class_at, int64_t num_classes, int32_t num_refs,
                         int64_t max_nodes, int64_t* status) {
  Program p = {code, length, blob, blob_length, classes, classes_length, class_at, num_classes,
               num_refs};
  IntVec byte = {0}, ref = {0}, eps = {0};
  int32_t num_states = 0;
  int32_t* result = 0;
  status[0] = program_nfa(&p, max_nodes, &byte, &ref, &eps, &num_states);
  int64_t total = 5 + byte.size + ref.size + eps.size;
  if (status[0] == RULE_DFA_OK && total <= INT32_MAX) {
    result = (int32_t*)malloc((size_t)total * sizeof(int32_t));
    if (result) {
      int32_t header[5] = {(int32_t)total, num_states, (int32_t)(byte.size / 4),
                           (int32_t)(ref.size / 3), (int32_t)(eps.size / 2)};
      memcpy(result, header, sizeof(header));
      memcpy(result + 5, byte.data, (size_t)byte.size * sizeof(int32_t));
      memcpy(result + 5 + byte.size, ref.data, (size_t)ref.size * sizeof(int32_t));
      memcpy(result + 5 + byte.size + ref.size, eps.data, (size_t)eps.size * sizeof(int32_t));
    }
  }
  if (status[0] == RULE_DFA_OK && !result) status[0] = NO_MEMORY;
  free(byte.data); free(ref.data); free(eps.data);
  return result;
}

// gxg_rule_dfa_program: gxg_rule_dfa of a program's NFA; status[2] is the NFA's fresh states
// (what the rule DFA cache records against max_nodes). status[0] as gxg_rule_dfa's, or
// NFA_TOO_LARGE / BAD_PROGRAM (both: the Python construction runs, and raises or builds).
int32_t* gxg_rule_dfa_program(const int32_t* code, int64_t length, const uint8_t* blob,
                              int64_t blob_length, const int32_t* classes,
                              int64_t classes_length, const int64_t* class_at,
                              int64_t num_classes, int32_t num_refs, int64_t max_nodes,
                              int64_t budget, double seconds_left, int64_t* status) {
  Program p = {code, length, blob, blob_length, classes, classes_length, class_at, num_classes,
               num_refs};
  IntVec byte = {0}, ref = {0}, eps = {0};
  int32_t num_states = 0;
  int32_t* result = 0;
  status[1] = 0;
  status[0] = program_nfa(&p, max_nodes, &byte, &ref, &eps, &num_states);
  if (status[0] == RULE_DFA_OK) {
    status[2] = num_states - 2;
    result = gxg_rule_dfa(num_states, byte.data, byte.size / 4, ref.data, ref.size / 3,
                          num_refs, eps.data, eps.size / 2, budget, seconds_left, status);
  }
  free(byte.data); free(ref.data); free(eps.data);
  return result;
}
