"""Training: the pretraining and fine-tuning loops, optimizers and schedules, precision, torchrun set-up,
checkpoints and run folders, curves from a run's metrics."""
