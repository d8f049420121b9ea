// Host C kernels of the vocabulary walk (gxg/compiler/vocab_walk.py): walks of (token, state)
// pairs byte by byte, skipping runs of looping states, as vocab_walk._walk_runs does in numpy.
//
// Built at run time by the system C compiler and loaded with ctypes (gxg/native.py); every
// caller has the numpy walk as its reference and its fallback (no compiler, GXG_NATIVE=0).
//
// gxg_walk_pairs
//   In:  n pairs, each a state, a byte position inside the sorted vocabulary's bytes and the
//        token's end; the walk's tables as they are now: transition[state * 256 + byte]
//        (DEAD = 0, UNKNOWN = -1: not computed yet), skip_ids[state] (a loop key, or NO_LOOP),
//        loop_checked[state] (were its loops asked for), the loop keys' byte sets
//        loop_bytes[key * 256 + byte] and whether every whole UTF-8 character loops too
//        (loop_utf8[key]), and per key the address of its RunBreaks table (int32 [bytes + 1],
//        the next break of every position) or 0 where it is not built (the run is then
//        scanned byte by byte: the same answer); the vocabulary's bytes and, per byte,
//        utf8_break (a byte >= 0x80 outside every whole character of its token) and utf8_tail
//        (a byte of a whole character other than its first); use_runs: 0 reads every byte
//        (no skipping, no WALK_NEW_LOOP: for few pairs, where asking a state for its loops
//        costs more than skipping saves).
//   Out: per pair, in place, its state and position where it stopped, and status[i]:
//        WALK_FINISHED  the token's end reached: state is the final state;
//        WALK_DEAD      a byte led to DEAD;
//        WALK_UNKNOWN   transition[state * 256 + data[position]] is not computed yet: the
//                       caller computes it and walks the pair again from there;
//        WALK_NEW_LOOP  the last byte led the state back to itself and its loops were never
//                       asked for: the caller asks (note_loops) and walks the pair again.
//   Work: per pair, one transition read per byte outside a run; per run, one read of its
//        key's break table, or (no table built) one byte-set test per byte of the run.
//   Invariant: a pair's answer equals the numpy walk's (vocab_walk._walk_runs): at every
//        position, first the run of its state's loop set is skipped to its first break (a
//        position inside a whole character is its own break: runs start at character
//        boundaries), clipped to the token's end; then one byte is read.
#include <stdint.h>

#define DEAD 0
#define UNKNOWN (-1)
#define NO_LOOP (-1)

enum { WALK_FINISHED = 0, WALK_DEAD = 1, WALK_UNKNOWN = 2, WALK_NEW_LOOP = 3 };

// One pair from (s, p) to the token's end e (the loop of gxg_walk_pairs's description);
// writes where it stopped and returns its outcome.
static uint8_t walk_pair(int32_t* state, int64_t* position, int64_t e,
                         const int32_t* transition, const int32_t* skip_ids,
                         const uint8_t* loop_checked, const uint8_t* loop_bytes,
                         const uint8_t* loop_utf8, const int64_t* break_tables,
                         const uint8_t* data, const uint8_t* utf8_break,
                         const uint8_t* utf8_tail, int32_t use_runs) {
  int32_t s = *state;
  int64_t p = *position;
  uint8_t outcome;
  for (;;) {
    int32_t key = use_runs ? skip_ids[s] : NO_LOOP;
    const int32_t* breaks = key != NO_LOOP ? (const int32_t*)break_tables[key] : 0;
    if (breaks && p < e) {  // the key's table: the next break in one read
      int64_t q = breaks[p];
      p = q < e ? q : e;
    } else if (key != NO_LOOP && p < e) {
      const uint8_t* loops = loop_bytes + (int64_t)key * 256;
      if (loop_utf8[key]) {
        if (!utf8_tail[p])  // inside a whole character: its own break
          while (p < e && (data[p] >= 0x80 ? !utf8_break[p] : loops[data[p]])) ++p;
      } else {
        while (p < e && loops[data[p]]) ++p;
      }
    }
    if (p >= e) { outcome = WALK_FINISHED; break; }
    int32_t t = transition[(int64_t)s * 256 + data[p]];
    if (t == UNKNOWN) { outcome = WALK_UNKNOWN; break; }
    ++p;
    if (t == DEAD) { s = DEAD; outcome = WALK_DEAD; break; }
    if (t == s && use_runs && !loop_checked[t]) { outcome = WALK_NEW_LOOP; break; }
    s = t;
  }
  *state = s;
  *position = p;
  return outcome;
}

void gxg_walk_pairs(int64_t n, int32_t* state, int64_t* position, const int64_t* end,
                    uint8_t* status, const int32_t* transition, const int32_t* skip_ids,
                    const uint8_t* loop_checked, const uint8_t* loop_bytes,
                    const uint8_t* loop_utf8, const int64_t* break_tables, const uint8_t* data,
                    const uint8_t* utf8_break, const uint8_t* utf8_tail, int32_t use_runs) {
  for (int64_t i = 0; i < n; ++i)
    status[i] = walk_pair(state + i, position + i, end[i], transition, skip_ids, loop_checked,
                          loop_bytes, loop_utf8, break_tables, data, utf8_break, utf8_tail,
                          use_runs);
}

// gxg_walk_trie: the token trie walked depth first from items (origin, trie node, state), as
// vocab_walk.walk_trie_parts walks it in numpy level by level below its first level.
//   In:  items: origin, node (a global trie node: gxg/compiler/vocab_walk.py FlatTrie), state,
//        kind: ITEM_ARRIVED (the node's token is found, then a looping state at depth >=
//        runs_from_depth hands the tokens below to pair walks, else the children are read),
//        ITEM_FOUND (the same, but the caller found the node's token already);
//        the trie as FlatTrie's [TRIE_ROWS, nodes] int32 table; per sorted token its offset
//        and whether it repeats its predecessor (left out: it ends where its twin ends);
//        the walk's tables and the vocabulary's bytes as gxg_walk_pairs reads them.
//   Out: found (origin, token, final state) triples; pairs (origin, token, state, position)
//        whose pair walk stopped (WALK_UNKNOWN, WALK_NEW_LOOP: the caller walks them on once
//        the tables have it); blocked items: ITEM_UNKNOWN (node: the child whose transition
//        from state, its parent's, is not computed yet), ITEM_NEW_LOOP (arrived at node in a
//        state that the byte led back to itself, loops never asked for), and items of the
//        other kinds left undone when a buffer could overflow (sizes[SIZE_*]: how many of each;
//        capacity[SIZE_*]: the room of each output, capacity[CAPACITY_STACK] the stack's,
//        capacity[CAPACITY_WORK] the items, children and pair walks one call may take before
//        it leaves the rest undone (so that the caller checks its deadline between calls);
//        every item given is either walked or among the blocked).
//   Work: one transition read per live (origin, prefix) above the runs, one pair walk per
//        token below a looping prefix; the stack holds at most 256 items per trie level.
enum { ITEM_ARRIVED = 0, ITEM_FOUND = 1, ITEM_UNKNOWN = 2, ITEM_NEW_LOOP = 3 };
enum { TRIE_CHILD_LO, TRIE_CHILD_HI, TRIE_BYTE, TRIE_TOKEN_END, TRIE_BELOW_LO, TRIE_BELOW_HI,
       TRIE_DEPTH, TRIE_ROWS };
enum { SIZE_FOUND, SIZE_BLOCKED, SIZE_PAIRS, CAPACITY_STACK, CAPACITY_WORK };

typedef struct {
  int64_t* origin;
  int32_t* node;
  int32_t* state;
  uint8_t* kind;
} Items;

static void put_item(Items* items, int64_t at, int64_t origin, int32_t node, int32_t state,
                     uint8_t kind) {
  items->origin[at] = origin;
  items->node[at] = node;
  items->state[at] = state;
  items->kind[at] = kind;
}

void gxg_walk_trie(int64_t num_items, const int64_t* item_origin, const int32_t* item_node,
                   const int32_t* item_state, const uint8_t* item_kind,
                   const int32_t* trie, int64_t trie_nodes, const int64_t* token_offsets,
                   const uint8_t* is_repeat, const int32_t* transition,
                   const int32_t* skip_ids, const uint8_t* loop_checked,
                   const uint8_t* loop_bytes, const uint8_t* loop_utf8,
                   const int64_t* break_tables, const uint8_t* data,
                   const uint8_t* utf8_break, const uint8_t* utf8_tail, int32_t runs_from_depth,
                   const int64_t* capacity, int64_t* sizes,
                   int64_t* found_origin, int64_t* found_token, int32_t* found_state,
                   int64_t* blocked_origin, int32_t* blocked_node, int32_t* blocked_state,
                   uint8_t* blocked_kind, int64_t* pair_origin, int64_t* pair_token,
                   int32_t* pair_state, int64_t* pair_position, int64_t* stack_origin,
                   int32_t* stack_node, int32_t* stack_state, uint8_t* stack_kind) {
  const int32_t* child_lo = trie + TRIE_CHILD_LO * trie_nodes;
  const int32_t* child_hi = trie + TRIE_CHILD_HI * trie_nodes;
  const int32_t* byte_of = trie + TRIE_BYTE * trie_nodes;
  const int32_t* token_end = trie + TRIE_TOKEN_END * trie_nodes;
  const int32_t* below_lo = trie + TRIE_BELOW_LO * trie_nodes;
  const int32_t* below_hi = trie + TRIE_BELOW_HI * trie_nodes;
  const int32_t* depth_of = trie + TRIE_DEPTH * trie_nodes;
  Items blocked = {blocked_origin, blocked_node, blocked_state, blocked_kind};
  Items stack = {stack_origin, stack_node, stack_state, stack_kind};
  int64_t found = 0, pairs = 0, held = 0, top = 0;
  int64_t found_cap = capacity[SIZE_FOUND], blocked_cap = capacity[SIZE_BLOCKED];
  int64_t pair_cap = capacity[SIZE_PAIRS], stack_cap = capacity[CAPACITY_STACK];
  int64_t work_left = capacity[CAPACITY_WORK];
  int64_t next = 0;  // the next given item
  int overflow = 0;
  while (top > 0 || next < num_items) {
    if (top == 0) {
      put_item(&stack, 0, item_origin[next], item_node[next], item_state[next],
               item_kind[next]);
      ++next;
      top = 1;
    }
    --top;
    int64_t origin = stack.origin[top];
    int32_t node = stack.node[top], s = stack.state[top];
    uint8_t kind = stack.kind[top];
    int32_t lo = child_lo[node], hi = child_hi[node];
    int64_t below = below_hi[node] - below_lo[node];
    // room for everything this item can add, and work left, else it and all undone items
    // wait (the first item of a call always goes: the caller gives room for one)
    work_left -= 1 + (hi - lo) + below;
    if (found + 1 + below > found_cap || pairs + below > pair_cap ||
        held + (hi - lo) + top + 1 + (num_items - next) > blocked_cap ||
        top + (hi - lo) > stack_cap || (work_left < 0 && (found > 0 || held > 0 || pairs > 0))) {
      ++top;
      overflow = 1;
      break;
    }
    int32_t token = token_end[node], depth = depth_of[node];
    if (kind == ITEM_ARRIVED && token >= 0) {
      found_origin[found] = origin;
      found_token[found] = token;
      found_state[found] = s;
      ++found;
    }
    if (depth >= runs_from_depth && skip_ids[s] != NO_LOOP) {  // the tokens below: pair walks
      for (int64_t t = below_lo[node]; t < below_hi[node]; ++t) {
        if (is_repeat[t]) continue;
        int32_t at = s;
        int64_t p = token_offsets[t] + depth;
        uint8_t outcome = walk_pair(&at, &p, token_offsets[t + 1], transition, skip_ids,
                                    loop_checked, loop_bytes, loop_utf8, break_tables, data,
                                    utf8_break, utf8_tail, 1);
        if (outcome == WALK_FINISHED) {
          found_origin[found] = origin;
          found_token[found] = t;
          found_state[found] = at;
          ++found;
        } else if (outcome != WALK_DEAD) {
          pair_origin[pairs] = origin;
          pair_token[pairs] = t;
          pair_state[pairs] = at;
          pair_position[pairs] = p;
          ++pairs;
        }
      }
      continue;
    }
    // children pushed last first, so that they are taken in trie order
    for (int32_t c = hi - 1; c >= lo; --c) {
      int32_t t = transition[(int64_t)s * 256 + byte_of[c]];
      if (t == DEAD) continue;
      if (t == UNKNOWN) {
        put_item(&blocked, held++, origin, c, s, ITEM_UNKNOWN);
      } else if (t == s && !loop_checked[t]) {
        put_item(&blocked, held++, origin, c, t, ITEM_NEW_LOOP);
      } else {
        put_item(&stack, top++, origin, c, t, ITEM_ARRIVED);
      }
    }
  }
  if (overflow) {  // the stack's items, then the items not started, wait as they are
    for (int64_t k = 0; k < top; ++k)
      put_item(&blocked, held++, stack.origin[k], stack.node[k], stack.state[k],
               stack.kind[k]);
    for (; next < num_items; ++next)
      put_item(&blocked, held++, item_origin[next], item_node[next], item_state[next],
               item_kind[next]);
  }
  sizes[SIZE_FOUND] = found;
  sizes[SIZE_BLOCKED] = held;
  sizes[SIZE_PAIRS] = pairs;
}
