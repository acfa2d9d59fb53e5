"""Original TensorFlow checkpoints (google-research/albert, brightmart/albert_zh): a reader that needs no
TensorFlow and the conversion into albertlm / HuggingFace model folders."""
