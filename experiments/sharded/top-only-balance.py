#!/usr/bin/env python3
"""The best balance a plan of only the top of the label tree could give.

    experiments/sharded/top-only-balance.py PLAN.xmcp SHARDS STUBS[,STUBS...]

PLAN is a plan of the whole tree (`xmc train plan`, T = 1) with its per-unit cost estimates.
For each STUBS, a top-only plan is simulated: every node with at most max(100, ceil(L / STUBS))
labels whose parent has more becomes one unit (its whole subtree, trained and partitioned by
one shard), and the nodes above keep their per-output units. Each subtree's cost is the exact
sum of its units' estimates in the whole-tree plan, which a top-only plan cannot know (it never
builds the subtree), so the balance printed is a best case. The units go longest first to the
least loaded of SHARDS shards, as `xmc train shard` assigns them. Prints, per STUBS, the stub
count, the largest stub against the mean shard, and the slowest / mean shard.
"""
import heapq
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bundle_sections import sections  # noqa: E402


def main():
    path, shards, stub_counts = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    s = sections(path)
    first, n_children = s["tree0.first_child"], s["tree0.n_children"]
    offsets = s["tree0.label_offsets"]
    units, costs = s["units"], s["unit_costs"]
    n = len(first)
    children = [range(first[v], first[v] + n_children[v]) for v in range(n)]
    own_units = [[] for _ in range(n)]
    for k, cost in enumerate(costs):
        tree, node = units[4 * k], units[4 * k + 1]
        if tree == 0:
            own_units[node].append(cost)
    # Nodes are numbered breadth first: children come after their parent.
    subtree = [sum(u) for u in own_units]
    labels = [offsets[v + 1] - offsets[v] for v in range(n)]
    for v in range(n - 1, -1, -1):
        for c in children[v]:
            subtree[v] += subtree[c]
            labels[v] += labels[c]
    for stubs in map(int, stub_counts.split(",")):
        cut = max(100, -(-labels[0] // stubs))
        items, stack, n_stubs, largest = [], [0], 0, 0
        while stack:
            v = stack.pop()
            if labels[v] <= cut:
                items.append(subtree[v])
                n_stubs += 1
                largest = max(largest, subtree[v])
            else:
                items.extend(own_units[v])
                stack.extend(children[v])
        heap = [(0, i) for i in range(shards)]
        for cost in sorted(items, reverse=True):
            load, i = heapq.heappop(heap)
            heapq.heappush(heap, (load + cost, i))
        loads = [load for load, _ in heap]
        mean = sum(loads) / shards
        print(
            f"stubs {stubs}: at most {cut} labels each, {n_stubs} stubs, largest stub / mean "
            f"shard {largest / mean:.3f}, slowest / mean shard {max(loads) / mean:.3f}"
        )


if __name__ == "__main__":
    main()
