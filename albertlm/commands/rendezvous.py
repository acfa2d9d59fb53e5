"""``albertlm rendezvous``: the store of torchrun's c10d rendezvous, served from a machine outside the job, so
that the job survives the death of any of its hosts (with the store on the first host, that host's death ends
the job).

    albertlm rendezvous --port 29400                       # on the login node, say 10.0.0.100
    torchrun --nnodes 1:4 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint 10.0.0.100:29400 \\
        --rdzv-conf is_host=false --rdzv-id albert-en --max-restarts 20 -m albertlm pretrain ...   # every host
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading

from albertlm.commands import flags


def register(sub: argparse._SubParsersAction) -> None:
    from albertlm.training.distributed import StoreSettings

    p = sub.add_parser("rendezvous", help="serve torchrun's c10d rendezvous store from outside the job")
    flags.add_flags(p, StoreSettings)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from albertlm.training.distributed import StoreSettings, rendezvous_store

    s = flags.build(args, StoreSettings)
    store = rendezvous_store(s)  # noqa: F841 - it serves while referenced
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"rendezvous store on port {s.port} of {socket.gethostname()} (every interface); start torchrun on every "
          f"host with --rdzv-backend c10d --rdzv-endpoint THIS_HOST:{s.port} --rdzv-conf is_host=false (Ctrl-C or "
          "SIGTERM stops it)", flush=True)  # fmt: skip
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    return 0
