"""The scaling simulation of issue 18's cluster benchmark: metadata throughput on m machines.

Two cores cannot run sixteen etcd machines, so the figures for m machines come from a model
fed with two things measured for real:

 * what each metadata operation asks of etcd, from `cairn bench cluster-trace`: the engine
   (meta-etcd, the code a mount runs) over m simulated etcd clusters records every request
   in order, as (cluster, kind);
 * how long a request occupies an etcd machine, from this run's loopback measurements of
   one etcd cluster of one member and of three members (see `calibrate`).

The model (RFS's placement): m machines in a ring; data cluster c has n members, on machines
c, c+1, ..., c+n-1 (its successors), its leader on machine c; the control cluster's members
are on machines 0..n-1. A range read or a read-only transaction occupies the leader's machine
for t_read. A writing transaction occupies the leader for t_lead, then each follower for
t_follow; it is acknowledged once a quorum (n // 2 + 1, the leader included) has it, while
the other followers still do their work. Each machine serves one request at a time, first
come first served. Clients (16 per machine, so machines stay busy) run closed loops: an
operation drawn at random from the phase's traces, its requests one after the other, then
the next. Throughput is operations per simulated second after a warm-up.

What it leaves out, and which way that errs: network time (it adds latency, not machine
work: enough clients hide it); the clients' own CPU (on their own machines); the follower
work of a linearizable read (etcd's ReadIndex asks a quorum for a heartbeat: small);
leader elections and compaction. Service times measured on loopback include the cairn
daemon's share of the two cores: they are too long, equally for every m, so the ratios
between m stand, and the absolute ops/s are low.
"""

from __future__ import annotations

import heapq
import json
import random
import subprocess
from dataclasses import dataclass

READS = ("range", "read-txn")
WRITES = ("txn", "grant", "revoke")
CLIENTS_PER_MACHINE = 16


@dataclass(frozen=True)
class ServiceTimes:
    """Seconds a request occupies an etcd machine."""
    read: float
    lead: float
    follow: float


def trace(cairn: str, clusters: int, dirs: int, files: int) -> dict:
    """`cairn bench cluster-trace` for `clusters` data clusters: phase -> operations."""
    out = subprocess.run(
        [cairn, "bench", "cluster-trace", "--clusters", str(clusters), "--dirs", str(dirs),
         "--files", str(files)],
        check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["phases"]


def counts(ops: list) -> tuple[float, float]:
    """Reads and writing requests per operation, on average."""
    reads = sum(1 for op in ops for _, kind in op if kind in READS)
    writes = sum(1 for op in ops for _, kind in op if kind in WRITES)
    return reads / len(ops), writes / len(ops)


def calibrate(one: dict, stat_1x1: float, create_1x1: float, create_1x3: float) -> ServiceTimes:
    """Service times from ops/s measured on loopback with etcd of one and of three members.

    `one` is the trace of one data cluster. A stat is reads only: t_read = 1 / (stats/s x
    reads per stat). A create's time beyond its reads is its writing transactions' at the
    leader. Three members on the one machine do the followers' work too: the time a create
    gains there is two followers' work. A follower measured cheaper than nothing (noise) is
    taken as costing what the leader does."""
    r_stat, _ = counts(one["stat"])
    r_create, w_create = counts(one["create"])
    read = 1.0 / (stat_1x1 * r_stat)
    lead = max(1.0 / create_1x1 - r_create * read, read) / w_create
    follow = (1.0 / create_1x3 - 1.0 / create_1x1) / (2 * w_create)
    if follow <= 0:
        follow = lead
    return ServiceTimes(read, lead, follow)


def simulate(ops: list, machines: int, members: int, times: ServiceTimes,
             measured_ops: int = 20000, seed: int = 1) -> float:
    """Operations per second of the phase whose operations are `ops` (traces over
    `machines` data clusters), with clusters of `members` members."""
    if members > machines:
        raise ValueError("a cluster's members need machines of their own")
    rng = random.Random(seed)
    quorum = members // 2 + 1
    free = [0.0] * machines

    def placement(cluster: int) -> list[int]:
        first = 0 if cluster < 0 else cluster
        return [(first + j) % machines for j in range(members)]

    homes = {c: placement(c) for c in range(-1, machines)}
    clients = CLIENTS_PER_MACHINE * machines
    # Per client: its operation's requests and the next one's index.
    current = [rng.choice(ops) for _ in range(clients)]
    step = [0] * clients
    # Acknowledgements of each write in flight, by its number: a follower that finishes
    # after the quorum did counts for nothing (its client has moved on).
    acks: dict[int, int] = {}
    # Events: (time, seq, kind, client, machine, write). Kinds: "issue" (the client sends
    # its next request), "leader" (the leader is done with a write), "follower-arrives"
    # and "follower" (a follower starts, is done).
    events: list = []
    seq = 0

    def push(t: float, kind: str, client: int, machine: int = -1, write: int = -1) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, client, machine, write))

    def serve(t: float, machine: int, cost: float) -> float:
        start = max(t, free[machine])
        free[machine] = start + cost
        return free[machine]

    def ack(t: float, client: int, write: int) -> None:
        acks[write] += 1
        if acks[write] == quorum:
            push(t, "issue", client)
        if acks[write] == members:
            del acks[write]

    for c in range(clients):
        push(0.0, "issue", c)
    warm = measured_ops // 10
    done = 0
    t_warm = 0.0
    writes = 0
    while True:
        t, _, kind, c, machine, write = heapq.heappop(events)
        if kind == "issue":
            op = current[c]
            if step[c] == len(op):
                done += 1
                if done == warm:
                    t_warm = t
                if done == warm + measured_ops:
                    return measured_ops / (t - t_warm)
                current[c] = rng.choice(ops)
                step[c] = 0
                op = current[c]
            cluster, req = op[step[c]]
            step[c] += 1
            home = homes[cluster]
            if req in READS:
                push(serve(t, home[0], times.read), "issue", c)
            else:
                writes += 1
                acks[writes] = 0
                push(serve(t, home[0], times.lead), "leader", c, home[0], writes)
        elif kind == "leader":
            cluster, _ = current[c][step[c] - 1]
            for follower in homes[cluster][1:]:
                push(t, "follower-arrives", c, follower, write)
            ack(t, c, write)
        elif kind == "follower-arrives":
            push(serve(t, machine, times.follow), "follower", c, machine, write)
        else:
            ack(t, c, write)


def scaling(cairn: str, times: ServiceTimes, machine_counts: list[int], dirs: int,
            files: int, log=lambda s: None) -> dict:
    """Simulated ops/s per phase for each m (clusters of one member) and each m >= 3
    (clusters of three), with the traces recorded for m clusters."""
    out: dict = {}
    for m in machine_counts:
        log(f"scaling simulation: tracing {m} cluster(s)")
        phases = trace(cairn, m, dirs, files)
        for n in (1, 3):
            if n > m:
                continue
            label = f"{m}x{n}"
            out[label] = {phase: simulate(ops, m, n, times) for phase, ops in phases.items()}
            out[label]["machines"] = m
            out[label]["members"] = n
    return out
