"""The order pretraining reads its data in: one seeded permutation per epoch, cut into every rank's
micro-batches, so N ranks take the same global batch one process would (see ``pretrain``'s docstring).

The position is (epoch, step within epoch): with it, ``--resume`` continues at the very next batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from albertlm.errors import TrainingError

if TYPE_CHECKING:
    from albertlm.training.distributed import DistInfo
    from albertlm.training.pretrain import PretrainConfig


def epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch, 0xA1BE]).permutation(n)


def rank_micro_batches(global_indices: np.ndarray, micro: int, rank: int, acc: int) -> list[list[int]]:
    """This rank's micro-batches of one global batch (see the module docstring)."""
    chunks = [global_indices[i : i + micro].tolist() for i in range(0, len(global_indices), micro)]
    return chunks[rank * acc : (rank + 1) * acc]


class StepBatches:
    """Yields, step after step, this rank's list of micro-batch index lists; tracks (epoch, step_in_epoch).

    A dynamic dataset re-plans its pairs every epoch, so its length (and the steps in an epoch) can
    change at each epoch boundary; both are recomputed there. The last partial global batch of an
    epoch is dropped, as every rank must see the same number of steps.
    """

    def __init__(self, dataset, cfg: PretrainConfig, info: DistInfo, acc: int, epoch: int = 0, step_in_epoch: int = 0):
        self.ds, self.cfg, self.info, self.acc = dataset, cfg, info, acc
        self.epoch, self.step_in_epoch = epoch, step_in_epoch
        self._perm_epoch, self._perm, self.steps_per_epoch = -1, None, 0
        self._enter_epoch()

    def _enter_epoch(self) -> None:
        if self._perm_epoch == self.epoch:
            return
        if hasattr(self.ds, "set_epoch"):
            self.ds.set_epoch(self.epoch)  # dynamic mode: fresh pairs and masks every epoch
        self._perm, self._perm_epoch = epoch_permutation(self.cfg.seed, self.epoch, len(self.ds)), self.epoch
        self.steps_per_epoch = len(self.ds) // self.cfg.global_batch_size
        if self.steps_per_epoch == 0:
            raise TrainingError(
                f"{self.cfg.data} holds {len(self.ds)} instances, fewer than one global batch "
                f"({self.cfg.global_batch_size}); lower --global-batch-size or build more data"
            )

    def next(self) -> list[list[int]]:
        self._enter_epoch()  # after a resume, the saved epoch
        if self.step_in_epoch >= self.steps_per_epoch:
            self.epoch, self.step_in_epoch = self.epoch + 1, 0
            self._enter_epoch()
        g = self.cfg.global_batch_size
        idx = self._perm[self.step_in_epoch * g : (self.step_in_epoch + 1) * g]
        self.step_in_epoch += 1
        return rank_micro_batches(idx, self.cfg.micro_batch_size, self.info.rank, self.acc)
