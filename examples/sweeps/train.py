"""A stand-in training program for sweeps: standard library only, fast, deterministic.

Its final loss is f(lr, layers, opt) = (log10(lr) + 2.5)^2 + 0.1 (layers - 5)^2 - 0.3 [opt = adamw]
(best near lr = 0.003, layers = 5, opt = adamw), approached over the epochs along a learning
curve. Each epoch prints a metrics line (`epoch=3 loss=0.41 accuracy=0.71`), which sluice reads
as the sweep's observations. With $SLUICE_CHECKPOINT_DIR set it saves its epoch there and
continues from it, so a promoted (ASHA) or preempted trial does not start over.

With --log-path (as Katib's pytorch-mnist example has it) the metrics go instead to that file,
through Python's logging, in the format Katib's File collector example filters:
`{metricName: accuracy, metricValue: 0.71};{metricName: loss, metricValue: 0.41}`.
"""

import argparse
import logging
import math
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, required=True)
p.add_argument("--layers", type=int, default=5)
p.add_argument("--opt", default="adam")
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--sleep", type=float, default=0.0, help="seconds per epoch")
p.add_argument("--log-path", default="", help="write the metrics to this file (Katib's format)")
a = p.parse_args()
if a.log_path:
    logging.basicConfig(
        format="%(asctime)s %(levelname)-8s %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%SZ",
        level=logging.INFO,
        filename=a.log_path,
    )

final = (math.log10(a.lr) + 2.5) ** 2 + 0.1 * (a.layers - 5) ** 2 - 0.3 * (a.opt == "adamw")
ckpt_dir = os.environ.get("SLUICE_CHECKPOINT_DIR")
ckpt = os.path.join(ckpt_dir, "epoch.txt") if ckpt_dir else None
start = 0
if ckpt and os.path.exists(ckpt):
    with open(ckpt) as f:
        start = int(f.read().strip() or 0)
for epoch in range(start + 1, a.epochs + 1):
    time.sleep(a.sleep)
    # Starts at final + 2 and decays towards final.
    loss = final + 2.0 * math.exp(-0.5 * epoch)
    accuracy = 1.0 / (1.0 + math.exp(loss))
    if a.log_path:
        logging.info(
            "{metricName: accuracy, metricValue: %.6f};{metricName: loss, metricValue: %.6f}",
            accuracy,
            loss,
        )
    else:
        print(f"epoch={epoch} loss={loss:.6f} accuracy={accuracy:.6f}", flush=True)
    if ckpt:
        tmp = ckpt + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(epoch))
        os.replace(tmp, ckpt)
