"""A stand-in for Katib's pytorch-mnist as a PyTorchJob: data-parallel training over TCP.

Standard library only, fast, deterministic. Every process of the gang fits y = 3x on its own
shard of the points with SGD and momentum; at each step the processes average their gradients
through rank 0 (an all-reduce), so they all hold the same weight. They find each other as a
PyTorchJob's do: RANK, WORLD_SIZE and MASTER_ADDR:MASTER_PORT, where rank 0 listens (sluice
sets them for every worker of a gang). Each prints `rank R of W`; rank 0 alone prints the
metrics line `loss=L` that Katib's StdOut collector (and sluice) reads.
"""

import argparse
import os
import socket
import time

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--batch-size", type=int, default=16)
p.add_argument("--lr", type=float, required=True)
p.add_argument("--momentum", type=float, default=0.0)
a = p.parse_args()

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
print(f"rank {rank} of {world}", flush=True)

if rank == 0:
    server = socket.create_server(addr)
    peers = [server.accept()[0].makefile("rw") for _ in range(world - 1)]
else:
    deadline = time.monotonic() + 30
    while True:
        try:
            up = socket.create_connection(addr).makefile("rw")
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def allreduce(value):
    """The mean over the gang of each process's `value`."""
    if rank == 0:
        total = value + sum(float(peer.readline()) for peer in peers)
        for peer in peers:
            peer.write(f"{total!r}\n")
            peer.flush()
    else:
        up.write(f"{value!r}\n")
        up.flush()
        total = float(up.readline())
    return total / world


# This process's shard: every world-th point of 256, from its rank on.
xs = [i / 256 for i in range(rank, 256, world)]
ys = [3.0 * x for x in xs]
w, velocity = 0.0, 0.0
for epoch in range(a.epochs):
    for start in range(0, len(xs), a.batch_size):
        batch = list(zip(xs[start : start + a.batch_size], ys[start : start + a.batch_size]))
        grad = sum(2 * (w * x - y) * x for x, y in batch) / len(batch)
        velocity = a.momentum * velocity + allreduce(grad)
        w -= a.lr * 10 * velocity
loss = allreduce(sum((w * x - y) ** 2 for x, y in zip(xs, ys)) / len(xs))
if rank == 0:
    print(f"epoch={a.epochs} loss={loss:.6f}")
