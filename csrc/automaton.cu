// Automaton walks of gxg's runtime on the GPU: accept, reset, rollback, uncertain-token check.
//
// In:  a pointer table (P_* indices; byte 0 of the runtime blob, gxg/blobs.py) to every buffer
//      gxg/layout.py declares — the runtime state, the DeviceArena's buffers and the kernels'
//      scratch — plus the per-launch arguments (token ids, rollback counts, the bitmask, token
//      budgets).
// Out: the state advanced exactly as ops/reference.py advances it, entry for entry: the same
//      moves in the same order (scan every top, close the new stacks with a LIFO work list in
//      seed order, one visit per (node, parent), pool entries reused — found through the pool
//      index, the hash-consing of ops/reference.py — or appended, window compaction after a
//      token, global compaction before a step when the pool is 3/4 full).
//
// Kernels
//   xg_accept      grid B x 32 threads, lane 0 of one warp per slot (the per-slot control flow
//                  diverges, so slots sharing a warp would run one after another). Per token: the token's
//                  bytes (a few), per byte one scan of every top and a closure (a single
//                  top scanning into a plain node skips the closure: its node and the pool
//                  size stay in registers, one entry is written); a token-node top whose
//                  set holds the token (token_moves) adds its move to the last byte's
//                  closure; at the token's end the token budgets count it (count_token:
//                  one pass over the tops, a new frame + top per counted top); reads the
//                  automaton tables (L1/L2 resident: a grammar is KBs) and the slot's pool;
//                  writes O(new entries) pool words + one history record (K+5 ints).
//   xg_accept_tokens  same grid: xg_accept's step for each token of the slot's row, up to the
//                  first rejected (a speculative verify in one launch).
//   xg_reset       same grid; the warp clears the slot's pool index (PI ints), then lane 0
//                  closes the root start (and counts the boundary there for token budgets).
//   xg_rollback    grid ceil(B/64) x 64, one thread per slot; restores a history record
//                  (K+5 ints per step rolled back; no divergence to speak of).
//   xg_uncertain   grid (B, parts) x 64 threads: block (b, 0) takes slot b's tops, one thread per
//                  uncertain token of the top's node; a top at a node without an entry yet
//                  (node_row == ROW_UNBUILT, a lazy registration) has every sorted token
//                  uncertain, strided over all the slot's parts (parts = max(1,
//                  UNBUILT_THREADS / (B x 64)): one wave at B = 1 walks the vocabulary; the
//                  other parts cost a read of the tops when no node lacks its entry); each
//                  thread walks its token's bytes from the full stack (pops read the pool,
//                  pushes stay in the thread's local
//                  memory: UNC_STACKS stacks of UNC_DEPTH pushed nodes) and ORs the token's bit
//                  into the bitmask row (atomicOr). Reads per token: its bytes, the tables, the
//                  stack entries it pops. A walk that outgrows the local arrays is queued.
//   xg_uncertain_wide  one block of WIDE_WORKERS threads: the queued walks again, with
//                  WIDE_STACKS stacks of WIDE_DEPTH nodes per worker in global memory
//                  (P_WIDE_SPACE); then the rows of slots with an error code get the stop
//                  tokens only (a walk that ran out of room in this fill left its row
//                  partial) and the queue's count is zeroed. An empty queue and no failed slot
//                  cost one launch that reads one int and ceil(B / WIDE_WORKERS) x 2 ints per
//                  thread. The answer is the same as the local walk's would be: both follow
//                  ops/reference.py's walk; only the room differs, and running out of the wide
//                  room sets the slot's error.
//   xg_budget_plan grid B x 32: per slot with a token budget (remaining[b] >= 0), how many
//                  allowed tokens may not fit and need a walk. A token of L bytes fits without
//                  a walk when D + L * max_rise <= remaining - 1 (D: the largest completion
//                  distance of the slot's stacks), so the tokens to walk are those longer than
//                  (remaining - 1 - D) / max_rise: a prefix of P_IDS_BY_LENGTH (ids by byte
//                  length, longest first), found by binary search. Writes its length to
//                  ``plan[b]`` (P_BUDGET_PLAN; 0: nothing to walk; every id when no bound
//                  holds).
//   xg_budget      grid (blocks_per_slot, B) x 256: the plan's prefix strided over the slot's
//                  threads (a block past it returns at once: a loose budget costs one read per
//                  block). A visited allowed non-stop token is walked from every top (a small
//                  local room first, BUDGET_STACKS x BUDGET_DEPTH when it outgrows that); when
//                  no stack it leaves is within remaining - 1 bytes of completion its bit is
//                  set in ``drop`` (P_BUDGET_DROP, atomicOr). Near the end of a budget: one
//                  walk per allowed token.
//   xg_budget_apply  grid B x 256: for a slot whose plan walked tokens, if row & ~drop keeps
//                  some token the row becomes that; otherwise (no completion fits) the row
//                  stays as it was. Zeroes the slot's ``drop`` row for the next fill (~3 x W
//                  words per slot). Semantics: ops/reference.py restrict_to_budget. A walk
//                  that outgrows even the full room counts as not fitting (a narrowing the CPU
//                  reference does not make: it needs more than BUDGET_STACKS parallel stacks
//                  or BUDGET_DEPTH pushes inside one token).
// Invariants
//   * node ids in the state are local to the slot's grammar; table row = node_base + node;
//   * a parent entry's index is smaller than its child's (compaction keeps order);
//   * an op that hits a limit leaves the state as it was (pool size restored) and sets error;
//   * unbound slots (grammar < 0) accept every token and keep no state.

// P_<NAME> (pointer table positions), FLAG_*, ERR_*, L_* (limits row positions), UNC_THREADS
// and BUDGET_THREADS come from gxg/layout.py, which declares them once: ops/cuda_automaton.py
// prepends its cuda_header() when it compiles this file.

typedef unsigned long long u64;

// Programmatic dependent launch (ops/dependent_launch.py): inside a graph's capture on sm_90+ the
// kernels are launched with programmatic stream serialization, so a kernel may start while the
// one before it in the stream is finishing. Every kernel calls this first, before it reads or
// writes any buffer: it waits for the grid before it to complete and its writes to be visible,
// then lets the next grid start launching (which waits here in turn). No-ops in a normal launch.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

template <typename T>
__device__ __forceinline__ T* ptr(const u64* table, int index) {
  return reinterpret_cast<T*>(table[index]);
}

struct Limits {
  int P, K, H, max_closure, work_cap, V, PI;
};

__device__ __forceinline__ Limits load_limits(const u64* t) {
  const int* l = ptr<const int>(t, P_LIMITS);
  Limits limits = {l[L_P], l[L_K], l[L_H], l[L_MAX_CLOSURE], l[L_WORK_CAP], l[L_V], l[L_PI]};
  return limits;
}

// One slot's view of the tables and state.
struct Slot {
  const u64* t;
  Limits lim;
  int b;
  int base;          // node_base of the slot's grammar
  int grammar;
  int* pool_node;    // this slot's pool rows
  int* pool_parent;
  int* pool_size;    // &pool_size[b]
  int* pool_index;   // this slot's pool index (PI slots)
  int* frame_slot;   // pool_index slot of each window entry this step indexed (-1: none)
  int indexed;       // entries this step put in the pool index
  bool counting;     // the grammar has token-budget counters (accept and reset set it)
  // tables
  const int* next_flat;
  int next_base;     // the grammar's scan targets start at next_flat[next_base], C_g per node
  int classes;       // C_g
  const int* node_flags;
  const int* ref_lo;
  const int* ref_hi;
  const int* ref_start;
  const int* ref_return;
  const int* byte_class;  // this grammar's row
};

__device__ Slot make_slot(const u64* t, int b) {
  Slot s;
  s.t = t;
  s.lim = load_limits(t);
  s.b = b;
  s.grammar = ptr<int>(t, P_GRAMMAR)[b];
  int g = s.grammar < 0 ? 0 : s.grammar;
  s.base = ptr<const int>(t, P_GRAMMAR_NODE_BASE)[g];
  s.pool_node = ptr<int>(t, P_POOL_NODE) + (size_t)b * s.lim.P;
  s.pool_parent = ptr<int>(t, P_POOL_PARENT) + (size_t)b * s.lim.P;
  s.pool_size = ptr<int>(t, P_POOL_SIZE) + b;
  s.pool_index = ptr<int>(t, P_POOL_INDEX) + (size_t)b * s.lim.PI;
  s.frame_slot = ptr<int>(t, P_FRAME_SLOT) + (size_t)b * s.lim.P;
  s.indexed = 0;
  s.counting = false;
  // A grammar's rows of scan targets are contiguous and in node order (the arena registers
  // node_next[base + n] = node_next[base] + C_g * n, and compaction moves them together), so a
  // scan is one dependent read, not two: node_next is read once here, with the other reads.
  s.next_base = ptr<const int>(t, P_NODE_NEXT)[s.base];
  s.classes = ptr<const int>(t, P_GRAMMAR_CLASSES)[g];
  s.next_flat = ptr<const int>(t, P_NEXT_FLAT);
  s.node_flags = ptr<const int>(t, P_NODE_FLAGS);
  s.ref_lo = ptr<const int>(t, P_NODE_REF_LO);
  s.ref_hi = ptr<const int>(t, P_NODE_REF_HI);
  s.ref_start = ptr<const int>(t, P_REF_START);
  s.ref_return = ptr<const int>(t, P_REF_RETURN);
  s.byte_class = ptr<const int>(t, P_GRAMMAR_BYTE_CLASS) + (size_t)g * 256;
  return s;
}

__device__ __forceinline__ int flags_of(const Slot& s, int node) {
  return s.node_flags[s.base + node];
}

__device__ __forceinline__ int scan(const Slot& s, int node, int byte) {
  return s.next_flat[s.next_base + node * s.classes + s.byte_class[byte]];
}

// ----------------------------------------------------------------------------- pool index

// The pool's hash-consing index: ops/reference.py ("pool index") documents it; the same moves.
// Returns the entry of (node, parent) the index holds, or -1; *free_slot: the first slot an
// insert may use (-1: none among the probes).
__device__ int index_probe(const Slot& s, int node, int parent, int size, int* free_slot) {
  int mask = s.lim.PI - 1;
  int start = pool_index_slot(node, parent, s.lim.PI);
  int free = -1;
  for (int i = 0; i < POOL_INDEX_PROBES; ++i) {
    int j = (start + i) & mask;
    int entry = s.pool_index[j];
    if (entry == POOL_INDEX_EMPTY) {
      *free_slot = free < 0 ? j : free;
      return -1;
    }
    if (entry == POOL_INDEX_TOMBSTONE || entry >= size) {
      if (free < 0) free = j;
    } else if (s.pool_node[entry] == node && s.pool_parent[entry] == parent) {
      *free_slot = free;
      return entry;
    }
  }
  *free_slot = free;
  return -1;
}

__device__ void index_insert(Slot& s, int entry, int size) {
  int free;
  if (index_probe(s, s.pool_node[entry], s.pool_parent[entry], size, &free) < 0 && free >= 0)
    s.pool_index[free] = entry;
}

// ----------------------------------------------------------------------------- closure

// Entry for (node, parent). A frame: one the pool index finds, else one created earlier in this
// closure ([created_from, size): it may be a top's), else a new one; a frame not found in the
// index is indexed when the probe had room. A top: one created earlier in this closure, else a
// new one. Returns -1 (and sets *error) if the pool is full.
__device__ int entry_for(Slot& s, int node, int parent, int created_from, bool frame,
                         int* error) {
  int size = *s.pool_size;
  int free = -1;
  if (frame) {
    int found = index_probe(s, node, parent, size, &free);
    if (found >= 0) return found;
  }
  int entry = -1;
  for (int i = created_from; i < size; ++i)
    if (s.pool_node[i] == node && s.pool_parent[i] == parent) { entry = i; break; }
  if (entry < 0) {
    if (size >= s.lim.P) {
      *error = ERR_POOL_FULL;
      return -1;
    }
    s.pool_node[size] = node;
    s.pool_parent[size] = parent;
    s.frame_slot[size] = -1;
    *s.pool_size = size + 1;
    entry = size;
  }
  if (frame && free >= 0) {
    s.pool_index[free] = entry;
    s.frame_slot[entry] = free;
    ++s.indexed;
  }
  return entry;
}

// Close the seeds (already on the work list, in LIFO order); writes the new tops into
// ``tops_out`` and returns their count, or -1 with *error set.
__device__ int close(Slot& s, int* work, int work_len, int* tops_out, int* can_end,
                     int* error) {
  int* seen = ptr<int>(s.t, P_SEEN) + (size_t)s.b * s.lim.max_closure * 2;
  int seen_len = 0;
  int num_tops = 0;
  int created_from = *s.pool_size;
  *can_end = 0;
  while (work_len > 0) {
    --work_len;
    int node = work[3 * work_len], parent = work[3 * work_len + 1],
        entry = work[3 * work_len + 2];
    // the visit's reads, issued together before its stores (a read after a store, or after a
    // branch on an earlier read, waits for it): the node's flags and reference range, and the
    // parent frame a pop continues at
    int flags = flags_of(s, node);
    int lo = s.ref_lo[s.base + node], hi = s.ref_hi[s.base + node];
    int parent_node = parent >= 0 ? s.pool_node[parent] : -1;
    int parent_parent = parent >= 0 ? s.pool_parent[parent] : -1;
    bool visited = false;
    for (int i = 0; i < seen_len; ++i)
      if (seen[2 * i] == node && seen[2 * i + 1] == parent) { visited = true; break; }
    if (visited) continue;
    if (seen_len >= s.lim.max_closure) { *error = ERR_CLOSURE_TOO_LARGE; return -1; }
    seen[2 * seen_len] = node;
    seen[2 * seen_len + 1] = parent;
    ++seen_len;
    if (flags & FLAG_SCANNABLE) {
      if (num_tops >= s.lim.K) { *error = ERR_TOO_MANY_STACKS; return -1; }
      if (entry < 0) entry = entry_for(s, node, parent, created_from, false, error);
      if (entry < 0) return -1;
      tops_out[num_tops++] = entry;
    }
    // pushes in edge order, then the pop; appended to the work list reversed so that the
    // first push is processed first (as the reference does)
    // a counter frame only pops again: pop through it at once (ops/reference.py _close)
    int pop = parent;
    if ((flags & FLAG_FINAL) && s.counting) {
      const int* count_next = ptr<const int>(s.t, P_NODE_COUNT_NEXT) + s.base;
      while (pop >= 0 && count_next[s.pool_node[pop]] >= 0) pop = s.pool_parent[pop];
    }
    int count = hi - lo + ((flags & FLAG_FINAL) && pop >= 0 ? 1 : 0);
    if (work_len + count > s.lim.work_cap) { *error = ERR_CLOSURE_TOO_LARGE; return -1; }
    int slot_index = work_len + count - 1;  // first push goes last (top of the LIFO)
    for (int e = lo; e < hi; ++e) {
      int ret = s.ref_return[e];
      int start = s.ref_start[e];  // read with ret, before entry_for's stores
      int frame = parent;
      if (!(flags_of(s, ret) & FLAG_PURE_RETURN)) {
        frame = entry_for(s, ret, parent, created_from, true, error);
        if (frame < 0) return -1;
      }
      work[3 * slot_index] = start;
      work[3 * slot_index + 1] = frame;
      work[3 * slot_index + 2] = -1;
      --slot_index;
    }
    if (flags & FLAG_FINAL) {
      if (pop < 0) {
        *can_end = 1;
      } else {
        work[3 * slot_index] = pop == parent ? parent_node : s.pool_node[pop];
        work[3 * slot_index + 1] = pop == parent ? parent_parent : s.pool_parent[pop];
        work[3 * slot_index + 2] = pop;
      }
    }
    work_len += count;
  }
  return num_tops;
}

// ----------------------------------------------------------------------------- compaction

#define REKEY (-2)  // a frame_slot mark of compact_window (not an index slot)

// Drop entries appended since ``base_size`` that no top reaches; remap the tops. When the step
// appended a frame, the pool index forgets the dropped and moved entries and learns the moved.
__device__ void compact_window(Slot& s, int base_size, int* tops, int num_tops) {
  int size = *s.pool_size;
  if (size == base_size) return;
  int* mark = ptr<int>(s.t, P_MARK) + (size_t)s.b * s.lim.P;
  for (int i = base_size; i < size; ++i) mark[i] = -1;
  for (int k = 0; k < num_tops; ++k) {
    int e = tops[k];
    while (e >= base_size && mark[e] < 0) { mark[e] = 0; e = s.pool_parent[e]; }
  }
  int next = base_size;  // new indices, ascending
  for (int i = base_size; i < size; ++i)
    if (mark[i] >= 0) mark[i] = next++;
  // the index slots this step filled: a dropped entry's becomes a tombstone; a moved one's
  // gets the new index when the key stays (parent not moved), else a tombstone and the new
  // key is inserted after the move
  bool rekey = false;  // frame_slot[i] = REKEY marks the entries to insert after the move
  if (s.indexed > 0)
    for (int i = base_size; i < size; ++i) {
      int j = s.frame_slot[i];
      if (j < 0 || mark[i] == i) continue;
      int parent = s.pool_parent[i];
      if (mark[i] < 0) {
        s.pool_index[j] = POOL_INDEX_TOMBSTONE;
      } else if (parent >= base_size && mark[parent] != parent) {
        s.pool_index[j] = POOL_INDEX_TOMBSTONE;
        s.frame_slot[i] = REKEY;
        rekey = true;
      } else {
        s.pool_index[j] = mark[i];
      }
    }
  for (int i = base_size; i < size; ++i) {  // a parent is moved (and renumbered) before its child
    if (mark[i] < 0) continue;
    int parent = s.pool_parent[i];
    if (parent >= base_size) parent = mark[parent];
    s.pool_node[mark[i]] = s.pool_node[i];
    s.pool_parent[mark[i]] = parent;
  }
  for (int k = 0; k < num_tops; ++k)
    if (tops[k] >= base_size) tops[k] = mark[tops[k]];
  *s.pool_size = next;
  if (rekey)  // the move wrote pool entries only: frame_slot still holds the marks
    for (int i = base_size; i < size; ++i)
      if (s.frame_slot[i] == REKEY) index_insert(s, mark[i], next);
}

// History ring slot of the i-th most recent step.
__device__ __forceinline__ int history_slot(int head, int i, int H) {
  return ((head - 1 - i) % H + H) % H;
}

// Keep only the entries that the live tops and the history reach (order kept).
__device__ void compact_pool(Slot& s) {
  const u64* t = s.t;
  int b = s.b, K = s.lim.K, H = s.lim.H;
  int size = *s.pool_size;
  int* mark = ptr<int>(t, P_MARK) + (size_t)b * s.lim.P;
  int* tops = ptr<int>(t, P_TOPS) + (size_t)b * K;
  int num_tops = ptr<int>(t, P_NUM_TOPS)[b];
  int* hist_tops = ptr<int>(t, P_HIST_TOPS) + (size_t)b * H * K;
  int* hist_num = ptr<int>(t, P_HIST_NUM_TOPS) + (size_t)b * H;
  int* hist_pool = ptr<int>(t, P_HIST_POOL_SIZE) + (size_t)b * H;
  int head = ptr<int>(t, P_HIST_HEAD)[b], len = ptr<int>(t, P_HIST_LEN)[b];
  for (int i = 0; i < size; ++i) mark[i] = -1;
  for (int k = 0; k < num_tops; ++k)
    for (int e = tops[k]; e >= 0 && mark[e] < 0; e = s.pool_parent[e]) mark[e] = 0;
  for (int i = 0; i < len; ++i) {
    int step = history_slot(head, i, H);
    for (int k = 0; k < hist_num[step]; ++k)
      for (int e = hist_tops[step * K + k]; e >= 0 && mark[e] < 0; e = s.pool_parent[e])
        mark[e] = 0;
  }
  int next = 0;
  for (int i = 0; i < size; ++i) {
    if (mark[i] < 0) continue;
    int parent = s.pool_parent[i];
    if (parent >= 0) parent = mark[parent];
    mark[i] = next;
    s.pool_node[next] = s.pool_node[i];
    s.pool_parent[next] = parent;
    ++next;
  }
  *s.pool_size = next;
  for (int k = 0; k < num_tops; ++k) tops[k] = mark[tops[k]];
  for (int i = 0; i < len; ++i) {
    int step = history_slot(head, i, H);
    for (int k = 0; k < hist_num[step]; ++k)
      hist_tops[step * K + k] = mark[hist_tops[step * K + k]];
    hist_pool[step] = next;
  }
  for (int j = 0; j < s.lim.PI; ++j) s.pool_index[j] = POOL_INDEX_EMPTY;
  for (int i = 0; i < next; ++i) index_insert(s, i, next);
}

// ----------------------------------------------------------------------------- history

__device__ void push_history(const u64* t, int b, const Limits& lim, int pool_size_before) {
  int K = lim.K, H = lim.H;
  // every read first, issued together (a read after a store to global memory waits for it)
  int* head_p = ptr<int>(t, P_HIST_HEAD) + b;
  int* len_p = ptr<int>(t, P_HIST_LEN) + b;
  int head = *head_p;
  int count = ptr<int>(t, P_NUM_TOPS)[b];
  int len = *len_p;
  signed char can_end = ptr<signed char>(t, P_CAN_END)[b];
  signed char terminated = ptr<signed char>(t, P_TERMINATED)[b];
  const int* tops = ptr<int>(t, P_TOPS) + (size_t)b * K;
  int first = count > 0 ? tops[0] : 0;
  int* dst = ptr<int>(t, P_HIST_TOPS) + ((size_t)b * H + head) * K;
  if (count > 0) dst[0] = first;
  for (int k = 1; k < count; ++k) dst[k] = tops[k];
  ptr<int>(t, P_HIST_NUM_TOPS)[(size_t)b * H + head] = count;
  ptr<int>(t, P_HIST_POOL_SIZE)[(size_t)b * H + head] = pool_size_before;
  ptr<signed char>(t, P_HIST_CAN_END)[(size_t)b * H + head] = can_end;
  ptr<signed char>(t, P_HIST_TERMINATED)[(size_t)b * H + head] = terminated;
  *head_p = (head + 1) % H;
  *len_p = min(len + 1, H);
}

// ----------------------------------------------------------------------------- accept

// Whether ``token`` is in the set of token node ``node``: its bit in the node's accept row
// (the mask cache gives a token node exactly its set's matchable tokens).
__device__ __forceinline__ bool in_token_set(const Slot& s, int node, int token) {
  int row = ptr<const int>(s.t, P_NODE_ROW)[s.base + node];
  const int* rows = ptr<const int>(s.t, P_ACCEPT_ROWS);
  return row >= 0 &&
         ((rows[(size_t)row * ((s.lim.V + 31) / 32) + (token >> 5)] >> (token & 31)) & 1);
}

// Token-level items (gxg/compiler/automaton.py): the moves of ``token`` from the step's first
// tops (P_TOPS, unchanged until the step ends) whose node is a token node whose set holds it
// (the bit of the node's accept row), as closure seeds (target, parent, -1) in top order.
// Counts them; with ``work`` also writes them LIFO-reversed below index ``at`` (the first at
// at - 1), where the seeds of the token's last byte leave room (ops/reference.py _token_seeds).
__device__ int token_moves(const Slot& s, int token, int* work, int at) {
  const int* token_next = ptr<const int>(s.t, P_NODE_TOKEN_NEXT);
  const int* tops = ptr<const int>(s.t, P_TOPS) + (size_t)s.b * s.lim.K;
  int num = ptr<const int>(s.t, P_NUM_TOPS)[s.b];
  int count = 0;
  for (int k = 0; k < num; ++k) {
    int e = tops[k];
    int node = s.pool_node[e];
    int target = token_next[s.base + node];
    if (target < 0 || !in_token_set(s, node, token)) continue;
    if (work) {
      int w = at - 1 - count;
      work[3 * w] = target;
      work[3 * w + 1] = s.pool_parent[e];
      work[3 * w + 2] = -1;
    }
    ++count;
  }
  return count;
}

// Token budgets (gxg/compiler/automaton.py): the token boundary after a token or a reset, as
// ops/reference.py _count_token does it, entry for entry. A top whose parent frame is a
// counter that is not the last moves under the next counter (a frame found in or added to the
// pool index; the top's own entry rewritten when this step made it at ``base_size`` or above
// and did not index it, else a new top entry); a top under the last counter is exhausted, and the
// exhausted tops are dropped unless nothing else is left (no other top, the grammar cannot
// end). Rewrites ``tops`` in place (order kept, a moved top equal to a kept one dropped);
// returns the new count, or -1 with *error set (pool full).
__device__ int count_token(Slot& s, int* tops, int num, int can_end, int base_size,
                           int* error) {
  const int* count_next = ptr<const int>(s.t, P_NODE_COUNT_NEXT) + s.base;
  bool counted = false, all_spent = true;
  for (int k = 0; k < num; ++k) {
    int parent = s.pool_parent[tops[k]];
    int counter = parent >= 0 ? s.pool_node[parent] : -1;
    int target = counter >= 0 ? count_next[counter] : -1;
    counted |= target >= 0;
    all_spent &= target >= 0 && target == counter;
  }
  if (!counted) return num;
  bool drop_spent = can_end || !all_spent;
  int out = 0;
  for (int k = 0; k < num; ++k) {
    int entry = tops[k];
    int node = s.pool_node[entry], parent = s.pool_parent[entry];
    int counter = parent >= 0 ? s.pool_node[parent] : -1;
    int target = counter >= 0 ? count_next[counter] : -1;
    bool spent = target >= 0 && target == counter;
    if (spent && drop_spent) continue;
    bool moved = target >= 0 && !spent;
    if (moved) {
      parent = entry_for(s, target, s.pool_parent[parent], *s.pool_size, true, error);
      if (parent < 0) return -1;
    }
    bool seen = false;
    for (int i = 0; i < out && !seen; ++i)
      seen = s.pool_node[tops[i]] == node && s.pool_parent[tops[i]] == parent;
    if (seen) continue;
    if (moved && entry >= base_size && s.frame_slot[entry] < 0) {
      s.pool_parent[entry] = parent;
    } else if (moved) {
      entry = entry_for(s, node, parent, *s.pool_size, false, error);
      if (entry < 0) return -1;
    }
    tops[out++] = entry;
  }
  return out;
}

// ``token``: the id whose bytes ``data`` are, when the grammar has token nodes (its token-node
// moves join the last byte's closure), else -1 (a string, or no token node to move).
// ``s.counting``: the step is a token of a grammar with token budgets (count_token at its
// end; the closures pop through counter frames at once).
__device__ bool accept_bytes(Slot& s, const unsigned char* data, int length, int token) {
  const u64* t = s.t;
  int b = s.b, K = s.lim.K;
  int* error_p = ptr<int>(t, P_ERROR) + b;
  int* cur = ptr<int>(t, P_TOPS_A) + (size_t)b * K;
  int* nxt = ptr<int>(t, P_TOPS_B) + (size_t)b * K;
  int* tops = ptr<int>(t, P_TOPS) + (size_t)b * K;
  // the step's first reads issued together, before any store (compaction leaves the count
  // of tops and can_end as they are)
  int base_size = *s.pool_size;
  int num = ptr<int>(t, P_NUM_TOPS)[b];
  int can_end = ptr<signed char>(t, P_CAN_END)[b];
  int first = tops[0];  // the slot's K >= 1 entries: read, used only when num > 0
  // the first top's node, for the fast path's first byte (compaction renumbers entries, not
  // their nodes)
  int first_node = num > 0 ? s.pool_node[first] : -1;
  if (base_size > (3 * s.lim.P) / 4) {
    compact_pool(s);
    base_size = *s.pool_size;
  }
  for (int k = 0; k < num; ++k) cur[k] = tops[k];
  int* work = ptr<int>(t, P_WORK) + (size_t)b * s.lim.work_cap * 3;
  // the token's moves from token-node tops (closed with its last byte's seeds)
  int token_count = token >= 0 ? token_moves(s, token, nullptr, 0) : 0;
  // the fast path's registers: the single top's node and the pool size (-1: load them), and
  // the scan of byte i from top_node read ahead with byte i - 1's checks (-2: not read)
  int top_node = first_node, size = -1, ahead = -2;
  for (int i = 0; i < length; ++i) {
    int byte = data[i];
    int moves = i == length - 1 ? token_count : 0;
    if (num == 1 && moves == 0) {
      // One top scanning into a plain node (scans, not final, no references): the closure is
      // that stack alone (ops/reference.py _plain_step): overwrite the top's entry when it is
      // the step's last and not indexed, else append; a chain of dependent L1 hits per byte.
      int e = cur[0];
      if (top_node < 0) top_node = s.pool_node[e];
      int target = ahead != -2 ? ahead : scan(s, top_node, byte);
      // the next byte's scan from target, read now, together with target's checks and before
      // this byte's stores (a read after a store waits for it): one round trip per byte
      ahead = target >= 0 && i + 1 < length ? scan(s, target, data[i + 1]) : -2;
      if (target >= 0 && flags_of(s, target) == FLAG_SCANNABLE &&
          s.ref_lo[s.base + target] == s.ref_hi[s.base + target]) {
        if (size < 0) size = *s.pool_size;
        if (e == size - 1 && e >= base_size && s.frame_slot[e] < 0) {
          s.pool_node[e] = target;
        } else {
          if (size >= s.lim.P) { *s.pool_size = base_size; *error_p = ERR_POOL_FULL; return false; }
          s.pool_node[size] = target;
          s.pool_parent[size] = s.pool_parent[e];
          s.frame_slot[size] = -1;
          cur[0] = size;
          *s.pool_size = ++size;
        }
        top_node = target;
        can_end = 0;
        continue;
      }
    }
    top_node = -1;
    size = -1;
    ahead = -2;
    // seeds in top order, then the token's moves, stored reversed so that the first seed is
    // processed first
    int seeds = moves;
    for (int k = 0; k < num; ++k)
      if (scan(s, s.pool_node[cur[k]], byte) >= 0) ++seeds;
    if (seeds == 0) {
      if (token_count > 0) { num = 0; can_end = 0; continue; }  // the moves come at the end
      *s.pool_size = base_size;
      return false;
    }
    if (seeds > s.lim.work_cap) { *s.pool_size = base_size; *error_p = ERR_CLOSURE_TOO_LARGE; return false; }
    int w = seeds - 1;
    for (int k = 0; k < num; ++k) {
      int target = scan(s, s.pool_node[cur[k]], byte);
      if (target < 0) continue;
      work[3 * w] = target;
      work[3 * w + 1] = s.pool_parent[cur[k]];
      work[3 * w + 2] = -1;
      --w;
    }
    if (moves > 0) token_moves(s, token, work, moves);
    int error = 0;
    int count = close(s, work, seeds, nxt, &can_end, &error);
    if (count < 0) { *s.pool_size = base_size; *error_p = error; return false; }
    num = count;
    int* swap = cur; cur = nxt; nxt = swap;
  }
  if (s.counting) {
    int error = 0;
    num = count_token(s, cur, num, can_end, base_size, &error);
    if (num < 0) { *s.pool_size = base_size; *error_p = error; return false; }
  }
  if (num == 0 && !can_end) { *s.pool_size = base_size; return false; }
  compact_window(s, base_size, cur, num);
  int new_size = *s.pool_size;
  push_history(t, b, s.lim, base_size);
  *s.pool_size = new_size;
  for (int k = 0; k < num; ++k) tops[k] = cur[k];
  ptr<int>(t, P_NUM_TOPS)[b] = num;
  ptr<signed char>(t, P_CAN_END)[b] = (signed char)can_end;
  return true;
}

// One token on a bound slot (xg_accept, xg_accept_tokens): false when it is rejected or hits
// a limit (the state as it was; a limit also sets the slot's error).
__device__ bool accept_one(const u64* t, Slot& s, long long token) {
  int b = s.b;
  // read with the checks below, so its latency overlaps theirs: a grammar without token
  // nodes skips the scan of the tops for token moves
  int token_steps = ptr<const int>(t, P_GRAMMAR_TOKEN_STEPS)[s.grammar];
  signed char* terminated = ptr<signed char>(t, P_TERMINATED) + b;
  // every read the checks need, issued together (an id out of range reads id 0's entries,
  // which the first check then ignores): one round trip instead of one per check
  bool in_range = token >= 0 && token < s.lim.V;
  int id = in_range ? (int)token : 0;
  const int* id_offsets = ptr<const int>(t, P_ID_OFFSETS);
  signed char is_terminated = *terminated;
  int error = ptr<int>(t, P_ERROR)[b];
  signed char is_stop = ptr<const signed char>(t, P_IS_STOP)[id];
  int lo = id_offsets[id], hi = id_offsets[id + 1];
  if (!in_range || is_terminated || error) return false;
  if (is_stop) {
    if (!ptr<signed char>(t, P_CAN_END)[b]) return false;
    push_history(t, b, s.lim, *s.pool_size);
    *terminated = 1;
    return true;
  }
  if (hi == lo) return false;  // special: empty bytes or padding
  s.indexed = 0;  // the step's record of indexed frames starts empty
  s.counting = (token_steps & COUNT_TOKENS) != 0;
  return accept_bytes(s, ptr<const unsigned char>(t, P_ID_BYTES) + lo, hi - lo,
                      (token_steps & TOKEN_MOVES) ? (int)token : -1);
}

extern "C" __global__ void xg_accept(const u64* t, int B, const long long* token_ids,
                                     bool* accepted) {
  wait_for_previous_grid();
  int b = blockIdx.x;
  if (b >= B || threadIdx.x != 0) return;
  Slot s = make_slot(t, b);
  accepted[b] = s.grammar < 0 || accept_one(t, s, token_ids[b]);
}

// Row b: token_ids[b, :lengths[b]] (clamped to [0, T]) in order, up to the first rejected;
// counts[b] = how many were accepted, each one history step (ops/reference.py accept_tokens).
extern "C" __global__ void xg_accept_tokens(const u64* t, int B, int T,
                                            const long long* token_ids,
                                            const long long* lengths, int* counts) {
  wait_for_previous_grid();
  int b = blockIdx.x;
  if (b >= B || threadIdx.x != 0) return;
  long long length = lengths[b];
  int n = length < 0 ? 0 : (length > T ? T : (int)length);
  Slot s = make_slot(t, b);
  if (s.grammar < 0) { counts[b] = n; return; }
  const long long* row = token_ids + (size_t)b * T;
  int k = 0;
  while (k < n && accept_one(t, s, row[k])) ++k;
  counts[b] = k;
}

// ----------------------------------------------------------------------------- reset

extern "C" __global__ void xg_reset(const u64* t, int B, const bool* which) {
  wait_for_previous_grid();
  int b = blockIdx.x;
  if (b >= B || !which[b]) return;
  Slot s = make_slot(t, b);
  for (int j = threadIdx.x; j < s.lim.PI; j += blockDim.x) s.pool_index[j] = POOL_INDEX_EMPTY;
  __syncthreads();
  if (threadIdx.x != 0) return;
  *s.pool_size = 0;
  ptr<int>(t, P_HIST_LEN)[b] = 0;
  ptr<int>(t, P_HIST_HEAD)[b] = 0;
  ptr<signed char>(t, P_TERMINATED)[b] = 0;
  ptr<int>(t, P_ERROR)[b] = 0;
  ptr<int>(t, P_NUM_TOPS)[b] = 0;
  ptr<signed char>(t, P_CAN_END)[b] = 0;
  if (s.grammar < 0) return;
  int* work = ptr<int>(t, P_WORK) + (size_t)b * s.lim.work_cap * 3;
  work[0] = ptr<const int>(t, P_GRAMMAR_ROOT)[s.grammar];
  work[1] = -1;
  work[2] = -1;
  int* tops = ptr<int>(t, P_TOPS) + (size_t)b * s.lim.K;
  int can_end = 0, error = 0;
  s.counting = (ptr<const int>(t, P_GRAMMAR_TOKEN_STEPS)[s.grammar] & COUNT_TOKENS) != 0;
  int count = close(s, work, 1, tops, &can_end, &error);
  if (count >= 0 && s.counting)
    count = count_token(s, tops, count, can_end, 0, &error);  // the first token starts here
  if (count < 0) {
    ptr<int>(t, P_ERROR)[b] = error;
    *s.pool_size = 0;
    return;
  }
  ptr<int>(t, P_NUM_TOPS)[b] = count;
  ptr<signed char>(t, P_CAN_END)[b] = (signed char)can_end;
}

// ----------------------------------------------------------------------------- status

// out[b] = (terminated, error code) of slot b: the state's flags as a fresh tensor, so that a
// torch.compile graph reads them without a view of the runtime blob (ops/xg_ops.py slot_status).
extern "C" __global__ void xg_status(const u64* t, int B, int* out) {
  wait_for_previous_grid();
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  out[2 * b] = ptr<const signed char>(t, P_TERMINATED)[b] != 0;
  out[2 * b + 1] = ptr<const int>(t, P_ERROR)[b];
}

// ----------------------------------------------------------------------------- rollback

extern "C" __global__ void xg_rollback(const u64* t, int B, const long long* num_tokens,
                                       bool* ok) {
  wait_for_previous_grid();
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  Limits lim = load_limits(t);
  long long n = num_tokens[b];
  int* len = ptr<int>(t, P_HIST_LEN) + b;
  if (ptr<int>(t, P_GRAMMAR)[b] < 0 || n == 0) { ok[b] = true; return; }
  if (n < 0 || n > *len) {
    ptr<int>(t, P_ERROR)[b] = ERR_ROLLBACK_TOO_FAR;
    ok[b] = false;
    return;
  }
  int K = lim.K, H = lim.H;
  int* head_p = ptr<int>(t, P_HIST_HEAD) + b;
  int head = *head_p;
  for (long long i = 0; i < n; ++i) head = (head - 1 + H) % H;
  size_t at = (size_t)b * H + head;
  int count = ptr<int>(t, P_HIST_NUM_TOPS)[at];
  int* tops = ptr<int>(t, P_TOPS) + (size_t)b * K;
  const int* src = ptr<int>(t, P_HIST_TOPS) + at * K;
  for (int k = 0; k < count; ++k) tops[k] = src[k];
  ptr<int>(t, P_NUM_TOPS)[b] = count;
  ptr<int>(t, P_POOL_SIZE)[b] = ptr<int>(t, P_HIST_POOL_SIZE)[at];
  ptr<signed char>(t, P_CAN_END)[b] = ptr<signed char>(t, P_HIST_CAN_END)[at];
  ptr<signed char>(t, P_TERMINATED)[b] = ptr<signed char>(t, P_HIST_TERMINATED)[at];
  *head_p = head;
  *len -= (int)n;
  ok[b] = true;
}

// ----------------------------------------------------------------------------- uncertain

#ifndef UNC_STACKS
#define UNC_STACKS 8      // parallel stacks one thread may hold during a token walk
#endif
#ifndef UNC_DEPTH
#define UNC_DEPTH 12      // nodes one stack may push above the pool part
#endif
#define UNC_WORK (UNC_STACKS * 4)

// The wide walk: a token whose walk outgrows the local arrays above is queued (slot, top,
// token) and walked again by xg_uncertain_wide, whose workers keep their stacks in global
// memory (P_WIDE_SPACE) with these capacities. Only past these (or past WIDE_QUEUE queued
// walks in one fill) does the slot get ERR_UNCERTAIN_WALK_TOO_LARGE.
#ifndef WIDE_STACKS
#define WIDE_STACKS 128
#endif
#ifndef WIDE_DEPTH
#define WIDE_DEPTH 32
#endif
#define WIDE_WORK (WIDE_STACKS * 4)
#ifndef WIDE_WORKERS
#define WIDE_WORKERS 256  // threads of xg_uncertain_wide (its grid: one block)
#endif
#ifndef WIDE_QUEUE
#define WIDE_QUEUE 65536  // queued walks per fill; P_WIDE_QUEUE = [count, (slot, top, token) x]
#endif

// A lane's stack: local nodes [0, depth) above pool entry ``below`` (-1: the bottom);
// depth 0 with below == -2 marks END (the root completed).
template <int DEPTH>
struct LaneStack {
  int depth;
  int below;
  int nodes[DEPTH];
};

template <int DEPTH>
__device__ bool same_stack(const LaneStack<DEPTH>& a, const LaneStack<DEPTH>& b) {
  if (a.depth != b.depth || a.below != b.below) return false;
  for (int i = 0; i < a.depth; ++i)
    if (a.nodes[i] != b.nodes[i]) return false;
  return true;
}

// Close ``count`` stacks in ``work`` (room for work_cap) into ``out`` (room for out_cap):
// scannable tops and END only, deduplicated. Returns the number kept, or -1 if out of room.
template <int DEPTH>
__device__ int lane_close(const Slot& s, LaneStack<DEPTH>* work, int count, int work_cap,
                          LaneStack<DEPTH>* out, int out_cap) {
  int kept = 0;
  int visited = 0;  // work[0, visited) are processed; the list grows at the end
  while (visited < count) {
    LaneStack<DEPTH> st = work[visited++];
    if (st.depth == 0) {  // END
      bool dup = false;
      for (int i = 0; i < kept; ++i) dup = dup || same_stack(out[i], st);
      if (!dup) { if (kept >= out_cap) return -1; out[kept++] = st; }
      continue;
    }
    int node = st.nodes[st.depth - 1];
    int flags = flags_of(s, node);
    bool seen = false;  // a stack visited before in this closure is skipped
    for (int i = 0; i < visited - 1 && !seen; ++i) seen = same_stack(work[i], st);
    if (seen) continue;
    if (flags & FLAG_SCANNABLE) {
      if (kept >= out_cap) return -1;
      out[kept++] = st;
    }
    for (int e = s.ref_lo[s.base + node]; e < s.ref_hi[s.base + node]; ++e) {
      if (count >= work_cap) return -1;
      LaneStack<DEPTH>& pushed = work[count];
      pushed = st;
      int ret = s.ref_return[e];
      if (flags_of(s, ret) & FLAG_PURE_RETURN) {
        pushed.nodes[pushed.depth - 1] = s.ref_start[e];
      } else {
        if (pushed.depth >= DEPTH) return -1;
        pushed.nodes[pushed.depth - 1] = ret;
        pushed.nodes[pushed.depth++] = s.ref_start[e];
      }
      ++count;
    }
    if (flags & FLAG_FINAL) {
      if (count >= work_cap) return -1;
      LaneStack<DEPTH>& popped = work[count++];
      popped = st;
      if (popped.depth > 1) {
        --popped.depth;
      } else if (popped.below >= 0) {  // pop into the pool: read the caller's entry
        popped.nodes[0] = s.pool_node[popped.below];
        popped.below = s.pool_parent[popped.below];
      } else {
        popped.depth = 0;
        popped.below = -2;  // END
      }
    }
  }
  return kept;
}

// Walk the bytes of token ``sorted`` (sorted-vocabulary index) from the stack whose top is pool
// entry ``top``. Returns 1 if some stack survives every byte, 0 if none does, -1 if the walk
// needed more than ``cap`` stacks (``a`` and ``work`` hold cap and 4 * cap) or DEPTH pushes.
// Walk bytes[lo, hi) from the stack whose top is pool entry ``top``; the surviving stacks are
// left in a[0, count). Returns count, or -1 if the walk needed more than ``cap`` stacks (``a``
// and ``work`` hold cap and 4 * cap) or DEPTH pushes.
template <int DEPTH, bool PLAIN_MOVES = false>
__device__ int walk_bytes(const Slot& s, int top, const unsigned char* bytes, int lo, int hi,
                          LaneStack<DEPTH>* a, LaneStack<DEPTH>* work, int cap) {
  int count = 1;
  a[0].depth = 1;
  a[0].below = s.pool_parent[top];
  a[0].nodes[0] = s.pool_node[top];
  for (int j = lo; j < hi && count > 0; ++j) {
    int byte = bytes[j];
    if (PLAIN_MOVES && count == 1 && a[0].depth > 0) {
      // One stack moving into a plain node (scannable, not final, no references: inside a
      // string, say): the closure would keep just that stack, so move its top in place
      // instead of copying stacks through the work list. Only in the walks from nodes
      // without an entry (every token, most of them long inside strings): in the other
      // walks the extra code cost the steady fill 0.6-1.8 us (H100, bench_step).
      int node = a[0].nodes[a[0].depth - 1];
      int target = scan(s, node, byte);
      if (target < 0) return 0;
      if (flags_of(s, target) == FLAG_SCANNABLE &&
          s.ref_lo[s.base + target] == s.ref_hi[s.base + target]) {
        a[0].nodes[a[0].depth - 1] = target;
        continue;
      }
    }
    int seeds = 0;
    for (int m = 0; m < count; ++m) {
      if (a[m].depth == 0) continue;  // END: nothing may follow
      int target = scan(s, a[m].nodes[a[m].depth - 1], byte);
      if (target < 0) continue;
      work[seeds] = a[m];
      work[seeds].nodes[a[m].depth - 1] = target;
      ++seeds;
    }
    count = seeds == 0 ? 0 : lane_close(s, work, seeds, 4 * cap, a, cap);
    if (count < 0) return -1;
  }
  return count;
}

template <int DEPTH, bool PLAIN_MOVES = false>
__device__ int walk_token(const Slot& s, int top, int sorted, LaneStack<DEPTH>* a,
                          LaneStack<DEPTH>* work, int cap) {
  const int* token_offsets = ptr<const int>(s.t, P_TOKEN_OFFSETS);
  int count = walk_bytes<DEPTH, PLAIN_MOVES>(s, top, ptr<const unsigned char>(s.t, P_TOKEN_BYTES),
                         token_offsets[sorted], token_offsets[sorted + 1], a, work, cap);
  return count < 0 ? -1 : (count > 0 ? 1 : 0);
}

__device__ __forceinline__ void set_bit(const u64* t, int* bitmask, int words, int b, int sorted) {
  int id = ptr<const int>(t, P_SORTED_TOKEN_IDS)[sorted];
  atomicOr(bitmask + (size_t)b * words + (id >> 5), 1 << (id & 31));
}

// Walk token ``sorted`` from ``top``; set its bit if some stack survives, queue it for the wide
// walk if it outgrows the local room (the slot gets ERR_UNCERTAIN_WALK_TOO_LARGE only when the
// queue is full).
template <bool PLAIN_MOVES>
__device__ __forceinline__ void check_token(const Slot& s, int top, int sorted, int* bitmask,
                                            int words, LaneStack<UNC_DEPTH>* a,
                                            LaneStack<UNC_DEPTH>* work) {
  int found = walk_token<UNC_DEPTH, PLAIN_MOVES>(s, top, sorted, a, work, UNC_STACKS);
  if (found > 0) set_bit(s.t, bitmask, words, s.b, sorted);
  if (found < 0) {  // too wide or too deep for local memory: queue it for the wide walk
    int* queue = ptr<int>(s.t, P_WIDE_QUEUE);
    int q = atomicAdd(queue, 1);
    if (q < WIDE_QUEUE) {
      queue[1 + 3 * q] = s.b;
      queue[2 + 3 * q] = top;
      queue[3 + 3 * q] = sorted;
    } else {
      atomicExch(ptr<int>(s.t, P_ERROR) + s.b, ERR_UNCERTAIN_WALK_TOO_LARGE);
    }
  }
}

extern "C" __global__ void xg_uncertain(const u64* t, int B, int* bitmask, int words) {
  wait_for_previous_grid();
  int b = blockIdx.x;
  // blockIdx.y: the slot's part. Part 0 walks the uncertain tokens of the slot's tops; every
  // part takes its share of the tops whose node has no entry yet (ROW_UNBUILT).
  int part = blockIdx.y, parts = gridDim.y;
  if (b >= B) return;
  Slot s = make_slot(t, b);
  int num_tops = ptr<int>(t, P_NUM_TOPS)[b];
  if (s.grammar < 0 || ptr<signed char>(t, P_TERMINATED)[b] || ptr<int>(t, P_ERROR)[b]) return;
  const int* uncertain = ptr<const int>(t, P_UNCERTAIN_TOKENS);
  const int* tops = ptr<int>(t, P_TOPS) + (size_t)b * s.lim.K;
  LaneStack<UNC_DEPTH> a[UNC_STACKS], work[UNC_WORK];
  const int* pair_below = ptr<const int>(t, P_PAIR_BELOW);
  for (int k = 0; k < num_tops; ++k) {
    int top = tops[k];
    int node = s.pool_node[top];
    int parent = s.pool_parent[top];
    // the top's reads issued together (a read after a branch on an earlier one waits for it)
    int row = ptr<const int>(t, P_NODE_ROW)[s.base + node];
    int lo = ptr<const int>(t, P_NODE_UNC_LO)[s.base + node];
    int hi = ptr<const int>(t, P_NODE_UNC_HI)[s.base + node];
    int pair_lo = ptr<const int>(t, P_NODE_PAIR_LO)[s.base + node];
    int pair_hi = ptr<const int>(t, P_NODE_PAIR_HI)[s.base + node];
    int below = parent >= 0 ? s.pool_node[parent] : -1;
    if (row == ROW_UNBUILT) {
      // no entry yet (a lazy registration): every sorted token, strided over all parts
      int num_sorted = ptr<const int>(t, P_LIMITS)[L_S];
      for (int i = part * blockDim.x + threadIdx.x; i < num_sorted; i += parts * blockDim.x)
        check_token<true>(s, top, i, bitmask, words, a, work);
      continue;
    }
    if (part != 0) continue;
    // The second level: the pair (node, node below) lists the tokens accepted given the
    // caller's frame, and the few still to walk; without a pair, walk all of the node's.
    const int* walk_list = uncertain;
    int pair = -1;
    for (int q = pair_lo; q < pair_hi; ++q)
      if (pair_below[q] == below) { pair = q; break; }
    if (pair >= 0) {
      // the pair's four bounds read together, before the atomics
      int acc_lo = ptr<const int>(t, P_PAIR_ACC_LO)[pair];
      int acc_hi = ptr<const int>(t, P_PAIR_ACC_HI)[pair];
      lo = ptr<const int>(t, P_PAIR_UNC_LO)[pair];
      hi = ptr<const int>(t, P_PAIR_UNC_HI)[pair];
      const int* accepted = ptr<const int>(t, P_PAIR_ACC_TOKENS);
      for (int i = acc_lo + threadIdx.x; i < acc_hi; i += blockDim.x) {
        int id = accepted[i];
        atomicOr(bitmask + (size_t)b * words + (id >> 5), 1 << (id & 31));
      }
      walk_list = ptr<const int>(t, P_PAIR_UNC_TOKENS);
    }
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x)
      check_token<false>(s, top, walk_list[i], bitmask, words, a, work);
  }
}

// The queued walks of this fill: one block of WIDE_WORKERS threads striding over them; each
// worker's stacks live in its own part of P_WIDE_SPACE. Launched after xg_uncertain on the same
// stream (the queue's count is zero before xg_uncertain). After the block's barrier it ends
// the fill: (a) every slot whose error code is set gets the stop tokens only (a walk that ran
// out of room in this fill left its row partial; slots that had failed before the fill got
// that from the dense fill already) and (b) the queue's count goes back to zero for the next
// fill. One block, so a barrier orders (a) and (b) after every walk: no other launch.
extern "C" __global__ void xg_uncertain_wide(const u64* t, int B, int* bitmask, int words) {
  wait_for_previous_grid();
  int worker = threadIdx.x;
  int* queue = ptr<int>(t, P_WIDE_QUEUE);
  int queued = min(queue[0], WIDE_QUEUE);
  typedef LaneStack<WIDE_DEPTH> Wide;
  Wide* a = ptr<Wide>(t, P_WIDE_SPACE) + (size_t)worker * (WIDE_STACKS + WIDE_WORK);
  Wide* work = a + WIDE_STACKS;
  for (int q = worker; q < queued; q += WIDE_WORKERS) {
    int b = queue[1 + 3 * q], top = queue[2 + 3 * q], sorted = queue[3 + 3 * q];
    Slot s = make_slot(t, b);
    int found = walk_token(s, top, sorted, a, work, WIDE_STACKS);
    if (found > 0) set_bit(t, bitmask, words, b, sorted);
    if (found < 0) atomicExch(ptr<int>(t, P_ERROR) + b, ERR_UNCERTAIN_WALK_TOO_LARGE);
  }
  __syncthreads();  // every walk is done and every worker has read the count
  if (threadIdx.x == 0) queue[0] = 0;
  const int* stop_words = ptr<const int>(t, P_STOP_WORDS);
  const int* grammar = ptr<const int>(t, P_GRAMMAR);
  const int* error = ptr<const int>(t, P_ERROR);
  for (int first = 0; first < B; first += blockDim.x) {
    int b = first + threadIdx.x;
    bool failed = b < B && grammar[b] >= 0 && error[b] != 0;
    if (!__syncthreads_or(failed)) continue;  // the usual case: none of these slots failed
    for (int f = first; f < min(B, first + (int)blockDim.x); ++f) {
      if (grammar[f] < 0 || error[f] == 0) continue;  // the same for every thread
      for (int w = threadIdx.x; w < words; w += blockDim.x)
        bitmask[(size_t)f * words + w] = stop_words[w];
    }
  }
}

// ----------------------------------------------------------------------------- budget

#ifndef BUDGET_STACKS
#define BUDGET_STACKS 8
#endif
#ifndef BUDGET_DEPTH
#define BUDGET_DEPTH 12
#endif
#ifndef BUDGET_SMALL_STACKS
#define BUDGET_SMALL_STACKS 2  // the first room of a budget walk (see walk_fits)
#endif
#ifndef BUDGET_SMALL_DEPTH
#define BUDGET_SMALL_DEPTH 6
#endif

// Completion distance of the pool part of a stack: the nodes from ``entry`` to the bottom.
__device__ long long pool_distance(const Slot& s, const int* distance, int entry) {
  long long total = 0;
  for (; entry >= 0; entry = s.pool_parent[entry]) total += distance[s.base + s.pool_node[entry]];
  return total;
}

// 1 if some stack left after walking bytes[lo, hi) from pool entry ``top`` is at most
// ``spare`` bytes from completion, 0 if none is, -1 if the walk outgrew STACKS x DEPTH. Not
// inlined, so that each room's local arrays are touched only by the threads that use it.
template <int STACKS, int DEPTH>
__device__ __noinline__ int top_fits(const Slot& s, int top, const int* distance,
                                     const unsigned char* bytes, int lo, int hi,
                                     long long spare) {
  LaneStack<DEPTH> a[STACKS], work[STACKS * 4];
  int count = walk_bytes(s, top, bytes, lo, hi, a, work, STACKS);
  if (count < 0) return -1;
  for (int m = 0; m < count; ++m) {
    long long total = a[m].depth == 0 ? 0 : pool_distance(s, distance, a[m].below);
    for (int i = 0; i < a[m].depth; ++i) total += distance[s.base + a[m].nodes[i]];
    if (total <= spare) return 1;
  }
  return 0;
}

// Some top's walk fits. Each walk first gets a small local room (most tokens need one or two
// stacks: a small frame keeps the local memory in L1, ~10x faster in a JSON string on an H200),
// and the full BUDGET_STACKS x BUDGET_DEPTH room only when it outgrows that. A top that is a
// token node whose set holds ``token`` fits when the stack after the move does (its distance
// before the closure is the closure's smallest: ops/reference.py _token_moves_fitting).
__device__ bool walk_fits(const Slot& s, const int* tops, int num_tops, const int* distance,
                          const unsigned char* bytes, int lo, int hi, long long spare,
                          int token) {
  const int* token_next = ptr<const int>(s.t, P_NODE_TOKEN_NEXT);
  bool has_token_nodes =
      (ptr<const int>(s.t, P_GRAMMAR_TOKEN_STEPS)[s.grammar] & TOKEN_MOVES) != 0;
  for (int k = 0; k < num_tops; ++k) {
    int node = s.pool_node[tops[k]];
    int target = has_token_nodes ? token_next[s.base + node] : -1;
    if (target >= 0) {
      if (in_token_set(s, node, token) &&
          pool_distance(s, distance, s.pool_parent[tops[k]]) + distance[s.base + target] <= spare)
        return true;
      continue;  // no byte moves a token node
    }
    int fits = top_fits<BUDGET_SMALL_STACKS, BUDGET_SMALL_DEPTH>(s, tops[k], distance, bytes,
                                                                  lo, hi, spare);
    if (fits < 0)
      fits = top_fits<BUDGET_STACKS, BUDGET_DEPTH>(s, tops[k], distance, bytes, lo, hi, spare);
    if (fits > 0) return true;
  }
  return false;
}

__device__ __forceinline__ bool budget_active(const u64* t, int b, const int* remaining) {
  return remaining[b] >= 0 && ptr<int>(t, P_GRAMMAR)[b] >= 0 &&
         !ptr<signed char>(t, P_TERMINATED)[b] && !ptr<int>(t, P_ERROR)[b];
}

extern "C" __global__ void xg_budget_plan(const u64* t, int B, const int* remaining) {
  wait_for_previous_grid();
  int* plan = ptr<int>(t, P_BUDGET_PLAN);
  int b = blockIdx.x;
  if (b >= B) return;
  __shared__ unsigned long long largest;  // D: the largest distance of the slot's stacks
  if (threadIdx.x == 0) largest = 0;
  __syncthreads();
  if (!budget_active(t, b, remaining)) {
    if (threadIdx.x == 0) plan[b] = 0;
    return;
  }
  Slot s = make_slot(t, b);
  const int* distance = ptr<const int>(t, P_NODE_DISTANCE);
  const int* tops = ptr<int>(t, P_TOPS) + (size_t)b * s.lim.K;
  int num_tops = ptr<int>(t, P_NUM_TOPS)[b];
  for (int k = threadIdx.x; k < num_tops; k += blockDim.x)
    atomicMax(&largest, (unsigned long long)pool_distance(s, distance, tops[k]));
  __syncthreads();
  if (threadIdx.x != 0) return;
  long long spare = (long long)remaining[b] - 1;
  int rise = ptr<const int>(t, P_GRAMMAR_MAX_RISE)[s.grammar];
  if (num_tops == 0 || rise < 0 || (long long)largest > spare) {
    plan[b] = s.lim.V;  // no bound holds: every token is walked
    return;
  }
  if (rise == 0) {
    plan[b] = 0;
    return;
  }
  long long fit_length = (spare - (long long)largest) / rise;
  const int* by_length = ptr<const int>(t, P_IDS_BY_LENGTH);
  const int* id_offsets = ptr<const int>(t, P_ID_OFFSETS);
  int lo = 0, hi = s.lim.V;  // the first rank whose token is short enough to fit
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    int id = by_length[mid];
    if (id_offsets[id + 1] - id_offsets[id] <= fit_length) hi = mid; else lo = mid + 1;
  }
  plan[b] = lo;
}

extern "C" __global__ void xg_budget(const u64* t, int B, const int* bitmask, int words,
                                     const int* remaining) {
  wait_for_previous_grid();
  const int* plan = ptr<const int>(t, P_BUDGET_PLAN);
  int* drop = ptr<int>(t, P_BUDGET_DROP);
  int b = blockIdx.y;
  if (b >= B) return;
  int todo = plan[b];
  if (blockIdx.x * blockDim.x >= todo) return;  // the whole block: nothing left to walk
  Slot s = make_slot(t, b);
  const int* distance = ptr<const int>(t, P_NODE_DISTANCE);
  const int* tops = ptr<int>(t, P_TOPS) + (size_t)b * s.lim.K;
  int num_tops = ptr<int>(t, P_NUM_TOPS)[b];
  long long spare = (long long)remaining[b] - 1;
  const int* by_length = ptr<const int>(t, P_IDS_BY_LENGTH);
  const int* id_offsets = ptr<const int>(t, P_ID_OFFSETS);
  const unsigned char* id_bytes = ptr<const unsigned char>(t, P_ID_BYTES);
  const signed char* is_stop = ptr<const signed char>(t, P_IS_STOP);
  const int* row = bitmask + (size_t)b * words;
  for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < todo; k += gridDim.x * blockDim.x) {
    int id = by_length[k];
    if (!((row[id >> 5] >> (id & 31)) & 1) || is_stop[id]) continue;
    if (!walk_fits(s, tops, num_tops, distance, id_bytes, id_offsets[id], id_offsets[id + 1],
                   spare, id))
      atomicOr(drop + (size_t)b * words + (id >> 5), 1 << (id & 31));
  }
}

extern "C" __global__ void xg_budget_apply(const u64* t, int B, int* bitmask, int words) {
  wait_for_previous_grid();
  const int* plan = ptr<const int>(t, P_BUDGET_PLAN);
  int* drop = ptr<int>(t, P_BUDGET_DROP);
  int b = blockIdx.x;
  if (b >= B || plan[b] == 0) return;  // nothing was walked, so nothing was dropped
  int* row = bitmask + (size_t)b * words;
  int* dropped = drop + (size_t)b * words;
  int any = 0;
  for (int w = threadIdx.x; w < words; w += blockDim.x) any |= row[w] & ~dropped[w];
  bool keeps = __syncthreads_or(any) != 0;  // some token is left after the drops
  for (int w = threadIdx.x; w < words; w += blockDim.x) {
    if (keeps) row[w] &= ~dropped[w];
    dropped[w] = 0;
  }
}

// Bytes of P_WIDE_SPACE and ints of P_WIDE_QUEUE the launcher must provide (read with
// xg_wide_sizes so the host never hard-codes the struct layout).
extern "C" __global__ void xg_wide_sizes(long long* out) {
  wait_for_previous_grid();
  out[0] = (long long)sizeof(LaneStack<WIDE_DEPTH>) * (WIDE_STACKS + WIDE_WORK) * WIDE_WORKERS;
  out[1] = 1 + 3LL * WIDE_QUEUE;
  out[2] = WIDE_WORKERS;
#if defined(__CUDA_ARCH__)
  out[3] = __CUDA_ARCH__;  // the launchers use PDL only when wait_for_previous_grid is compiled in
#else
  out[3] = 0;
#endif
}
