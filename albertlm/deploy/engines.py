"""The engines: what runs a model, one batch of int64 arrays in, the head's named outputs out.

    engine = load_engine("runs/sst2")                                  # PyTorch, an HF-layout model dir
    engine = load_engine("runs/sst2-onnx", "onnx", threads=2)          # an `albertlm export` dir
    engine({"input_ids": ids, "attention_mask": mask})                 # {"logits": (B, 2) array}

``TorchEngine`` runs the PyTorch model, ``OnnxEngine`` an exported graph through onnxruntime,
``OpenVinoEngine`` the same export through OpenVINO (its fp32 graph in fp32 or bf16, or its NNCF int8 file),
``albertlm.deploy.executorch.ExecuTorchEngine`` a .pte program. Inputs are ``input_ids``,
``attention_mask``, ``token_type_ids``, and ``p_mask`` for the SQuAD 2.0 head; engines with exits also take
the layer steps of ``albertlm.deploy.early_exit``. Text in and answers out (encoding, batching, decoding) is
``albertlm.deploy.inference.Predictor``, the same for every engine.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from albertlm.card import CARD
from albertlm.config import AlbertConfig
from albertlm.deploy import early_exit
from albertlm.devices import DEVICE_HELP, parse_device, resolve_device
from albertlm.errors import DataError, UserError, import_extra
from albertlm.files import inside, no_such_folder
from albertlm.heads import HEADS, ExitHeads, Head
from albertlm.model import attention_bias
from albertlm.training.precision import autocast as precision_autocast
from albertlm.training.precision import resolve as resolve_precision

MANIFEST_FILE = "deploy.json"  # written by `albertlm export` beside the graphs
OPENVINO_INT8 = "openvino_int8"  # deploy.json's key for the NNCF-quantized OpenVINO IR, when exported
ENGINES = ("torch", "onnx", "openvino", "executorch")
ENGINE_PRECISIONS = ("auto", "fp32", "bf16", "int8")  # what each engine computes in: see load_engine


@dataclass
class EngineSettings:
    """How a model is run (evaluate, predict, serve and the Python ``load`` share these)."""

    engine: str = field(default="torch", metadata={
        "help": "torch, or onnx / openvino / executorch: --model is then a folder written by `albertlm export` (onnx "
                "runs its int8 graph if present; openvino its static int8 file if present, else the fp32 graph, in "
                "bf16 where the CPU has it, else f32; executorch the .pte of --format executorch, int8 if present)",
        "choices": ENGINES})
    precision: str = field(default="auto", metadata={
        "help": "what the engine computes in. auto: onnx, openvino and executorch use the export's int8 when it has "
                "one; torch and openvino otherwise bf16 where the GPU or CPU has it (AVX-512 BF16 / AMX), else fp32. "
                "fp32 works on every engine; bf16 on torch and openvino; int8 on onnx, openvino and executorch",
        "choices": ENGINE_PRECISIONS})
    device: str = field(default="auto", metadata={
        "help": DEVICE_HELP + "; the torch engine's (onnx, openvino and executorch exports run on the CPU)",
        "parse": parse_device})
    threads: int | None = field(default=None, metadata={"help": "intra-op CPU threads (default: all cores)",
                                                        "min": 1})
# What needs an optional module and which extra installs it; every module not named here is in the deploy extra.
INSTALL = {"openvino": ("--engine openvino", "openvino"), "nncf": ("OpenVINO int8 (--calibration)", "openvino"),
           "executorch": ("ExecuTorch export and --engine executorch", "edge")}


def require(module: str) -> Any:
    """Import an optional dependency, or fail with the install command."""
    need, extra = INSTALL.get(module, ("ONNX export and serving", "deploy"))
    return import_extra(module, need, extra)


def architecture_of(model_dir: str | Path) -> str:
    """The model class named by ``config.json``'s ``architectures`` (AlbertModel when absent)."""
    path = Path(model_dir) / "config.json"
    if not Path(model_dir).is_dir():
        raise FileNotFoundError(f"{no_such_folder(model_dir)}; give a model directory (config.json + weights)")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; give a model directory (config.json + weights)")
    try:
        arch = (json.loads(path.read_text()).get("architectures") or ["AlbertModel"])[0]
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, TypeError, KeyError, IndexError) as e:
        raise DataError(f"{path}: not a valid config.json ({e}); re-save the model") from None
    if not isinstance(arch, str) or arch not in HEADS:
        raise DataError(f"{path}: architecture {arch!r} is not an albertlm head; known: {', '.join(HEADS)}")
    return arch


def load_torch_model(model_dir: str | Path) -> nn.Module:
    """The albertlm class named in config.json, loaded in eval mode."""
    return HEADS[architecture_of(model_dir)].cls.from_pretrained(model_dir).eval()


# --------------------------------------------------------------------------- engines
class TorchEngine:
    """A PyTorch model (in memory, or loaded from a directory) behind the engine call.

    ``precision="auto"`` runs the forward under bf16 autocast where the CPU has bf16 instructions (see
    ``albertlm.training.precision``); ``fp32`` is the reference arithmetic.
    """

    name = "torch"

    def __init__(self, model: nn.Module, precision: str = "auto"):
        self.model = model
        self.config = model.config
        self.head: Head = HEADS[type(model).__name__]
        self.architecture = self.head.architecture
        self.device = next(model.parameters()).device
        self.precision = resolve_precision(precision, self.device)
        self.can_exit = isinstance(model, ExitHeads) and model.has_exits

    @classmethod
    def load(cls, directory: str | Path, threads: int | None = None, precision: str = "auto",
             device: str = "auto") -> TorchEngine:  # fmt: skip
        if threads:
            torch.set_num_threads(threads)
        if (Path(directory) / MANIFEST_FILE).is_file():
            raise UserError(f"{directory} is an `albertlm export` folder (it has {MANIFEST_FILE}); use --engine onnx "
                            "or openvino")  # fmt: skip
        return cls(load_torch_model(directory).to(resolve_device(device)), precision)

    @contextlib.contextmanager
    def _running(self):
        """Eval mode (then back to the model's own), no autograd, the engine's precision.

        The mode is switched only when the model is training: ``eval()`` walks every submodule, and an
        early-exit call enters this several times (measured: a third of a 4-layer student's batch-1 call).
        """
        was_training = self.model.training
        if was_training:
            self.model.eval()
        try:
            with torch.inference_mode(), precision_autocast(self.precision, self.device):
                yield
        finally:
            if was_training:
                self.model.train()

    def _inputs(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        cpu = {k: torch.as_tensor(v, dtype=torch.long) for k, v in batch.items() if k in self.head.inputs}
        if self.device.type != "cuda":
            return cpu
        return {k: v.pin_memory().to(self.device, non_blocking=True) for k, v in cpu.items()}

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._running():
            out = self.model(**self._inputs(batch))
        result = {}
        for name in self.head.outputs:
            v = getattr(out, name)
            result[name] = v.float().cpu().numpy() if v.is_floating_point() else v.cpu().numpy()
        return result

    # early exit (albertlm.deploy.early_exit): the model's own layer steps, present for heads with exits
    def exit_start(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        inputs = self._inputs(batch)
        with self._running():
            hidden, _ = self.model.exit_start(inputs["input_ids"], inputs.get("attention_mask"),
                                              inputs.get("token_type_ids"))  # fmt: skip
        S = inputs["input_ids"].shape[-1]
        mask = inputs.get("attention_mask")
        mask = torch.ones_like(inputs["input_ids"]) if mask is None else mask
        return {"hidden": hidden, "attention_mask": mask.reshape(-1, S)}

    def exit_step(self, state: dict[str, torch.Tensor], layer: int) -> tuple[dict[str, torch.Tensor], np.ndarray]:
        with self._running():
            bias = attention_bias(state["attention_mask"], state["hidden"].dtype)
            hidden, logits = self.model.exit_step(state["hidden"], bias, layer)
        return {**state, "hidden": hidden}, logits.float().cpu().numpy()


class OnnxSession:
    """One onnxruntime CPU session over a graph file: ``{input name: array} -> {output name: array}``."""

    def __init__(self, path: str | Path, threads: int | None = None, spin: bool = False):
        ort = require("onnxruntime")
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist; export again: albertlm export --model DIR --out DIR")
        opts = ort.SessionOptions()
        # intra-op threads do the matmuls; one inter-op thread, since the graph is a single chain
        opts.intra_op_num_threads = threads or 0
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle workers spin by default; on shared cores that steals time from the busy ones (measured on
        # 2 shared cores: int8 batch 8 took 2.2 s spinning, 1.0 s without). spin=True for dedicated cores.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        self.path = path
        try:
            self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own Fail / InvalidProtobuf / RuntimeException types
            raise DataError(f"{path}: onnxruntime cannot load this graph ({str(e).splitlines()[0][:200]}); "
                            "export it again") from None  # fmt: skip
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        feeds = graph_feeds(batch, self.input_names)
        return dict(zip(self.output_names, self.session.run(self.output_names, feeds), strict=True))


INT_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "p_mask", "layer")  # the graphs' int64 inputs


def graph_feeds(batch: dict[str, Any], input_names: list[str]) -> dict[str, np.ndarray]:
    """The graph's inputs as arrays (torch tensors too): ids, masks and the exit graphs' layer as int64, the
    exit graphs' hidden states as they are; an absent mask or type ids take the defaults."""
    feeds = {}
    for name in input_names:
        value = batch.get(name)
        if value is None and name in ("attention_mask", "token_type_ids"):
            ids = np.asarray(batch["input_ids"])
            value = np.ones_like(ids, dtype=np.int64) if name == "attention_mask" else np.zeros_like(ids, np.int64)
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        feeds[name] = np.asarray(value, dtype=np.int64) if name in INT_INPUTS else np.asarray(value)
    return feeds


class _Export:
    """What an engine over an ``albertlm export`` folder holds besides its runtime: the checked manifest,
    the head and the config."""

    def _open_export(self, directory: str | Path) -> dict[str, str]:
        """Read and check ``deploy.json`` (every file it lists has its sha256); returns its graph files."""
        directory = Path(directory)
        manifest_path = directory / MANIFEST_FILE
        if not manifest_path.is_file():
            hint = "it is a model directory: use --engine torch, or export first: albertlm export --model DIR --out DIR"
            if not (directory / "config.json").is_file():
                hint = "export first: albertlm export --model DIR --out DIR"
            raise FileNotFoundError(f"{manifest_path} not found; {hint}")
        try:
            self.manifest = json.loads(manifest_path.read_text())
            files = self.manifest["files"]
            if not isinstance(files, dict):
                raise TypeError("files is not a table")
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
            raise DataError(f"{manifest_path}: damaged manifest ({e}); export again") from None
        if ("pte" in self.manifest) != (self.name == "executorch"):  # an ONNX folder and a .pte folder differ
            made = "--format executorch: use --engine executorch" if "pte" in self.manifest else (
                "--format onnx: use --engine onnx or openvino")
            raise UserError(f"{directory} was exported with {made}")
        for key, name in files.items():
            inside(directory, name, f"{manifest_path} files.{key}", DataError)
        _verify_export(directory, self.manifest)
        self.directory = directory
        self.architecture = self.manifest["architecture"]
        self.head = HEADS[self.architecture]
        self.config = AlbertConfig.load(directory)
        if "exit" in self.manifest:
            early_exit.check_exit_entry(directory, self.manifest["exit"], self.config)
        self._exit_graphs: early_exit.ExitGraphs | None = None
        return files

    def _open_exits(self, session: Any, variant: str) -> None:
        """Where the export's exit graphs (``deploy.json`` "exit") come from; they are opened at the first exit
        step, so a model served at full depth does not compile them at start-up."""
        self._exit_source = (session, variant)

    @property
    def can_exit(self) -> bool:
        return "exit" in self.manifest

    @property
    def exit_graphs(self) -> early_exit.ExitGraphs:
        if self._exit_graphs is None:
            session, variant = self._exit_source
            self._exit_graphs = early_exit.ExitGraphs(self.directory, self.manifest["exit"], session, variant)
        return self._exit_graphs

    def exit_start(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        return self.exit_graphs.exit_start(batch)

    def exit_step(self, state: dict[str, np.ndarray], layer: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
        return self.exit_graphs.exit_step(state, layer)


class OnnxEngine(_Export, OnnxSession):
    """An exported directory (``albertlm export``): the graph's session plus its config and manifest.

    ``precision="auto"`` picks the int8 graph when the directory has one (that is why it was exported);
    ``"fp32"`` and ``"int8"`` pick that graph.
    """

    name = "onnx"

    def __init__(self, directory: str | Path, threads: int | None = None, precision: str = "auto"):
        files = self._open_export(directory)
        if precision not in ("auto", "fp32", "int8"):
            raise UserError(f"--engine onnx runs fp32 or int8 graphs, not {precision!r}")
        if precision == "int8" and "int8" not in files:
            raise FileNotFoundError(f"{directory} has no int8 graph; export with --quantize int8")
        use_int8 = "int8" in files if precision == "auto" else precision == "int8"
        super().__init__(self.directory / files["int8" if use_int8 else "fp32"], threads)
        self.precision = "int8" if use_int8 else "fp32"
        if use_int8:  # dynamic int8: one row at a time (see PerRow), the exit graphs as well
            self._open_exits(lambda path, _outputs: PerRow(OnnxSession(path, threads), EXIT_SEQUENCE), "int8")
        else:
            self._open_exits(lambda path, _outputs: OnnxSession(path, threads), "fp32")

    def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        if self.precision == "int8":
            tagging = self.architecture == "AlbertForTokenClassification"
            return PerRow(super().__call__, SEQUENCE_OUTPUTS, tagging)(graph_feeds(batch, self.input_names))
        return super().__call__(batch)


# Outputs with a position axis (padded back after a row is run alone); the exit graphs' hidden states.
SEQUENCE_OUTPUTS = frozenset({"last_hidden_state", "start_logits", "end_logits"})
EXIT_SEQUENCE = frozenset({"hidden", "hidden_out"})


class PerRow:
    """A session run on each row of a batch alone, cut to the row's own length, sequence outputs padded back
    with zeros: for dynamic int8, whose activation scales are picked per call (onnxruntime's per tensor),
    so that a row's answer is the same alone and in any batch (issue 45; measured on SST-2 dev, whole
    batches moved scores by up to 0.015). ``sequence``: the outputs with a position axis; a tagging head's
    ``logits`` is one (its engine says so with ``tagging``)."""

    def __init__(self, session: Any, sequence: frozenset[str], tagging: bool = False, min_length: int = 1):
        self.session, self.min_length = session, min_length
        self.sequence = sequence | ({"logits"} if tagging else set())

    def __call__(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        feeds = {k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
                 for k, v in feeds.items()}  # fmt: skip
        mask = feeds["attention_mask"]
        S = mask.shape[-1]
        parts = []
        for i in range(len(mask)):
            used = np.flatnonzero(mask[i].reshape(-1, S).any(axis=0))
            n = min(max(int(used.max()) + 1 if used.size else 1, self.min_length), S)
            row = {k: v if k == "layer" else v[i : i + 1, :n] if k == "hidden" else v[i : i + 1, ..., :n]
                   for k, v in feeds.items()}  # fmt: skip
            out = self.session(row)
            parts.append({k: np.pad(v, [(0, 0), (0, S - n)] + [(0, 0)] * (v.ndim - 2)) if k in self.sequence and n < S
                          else v for k, v in out.items()})  # fmt: skip
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


class OpenVinoSession:
    """One OpenVINO CPU compilation of a graph file (ONNX or OpenVINO IR): ``{input: array} -> {output: array}``.

    ``hint`` is what the matmuls and activations not quantized compute in (``"bf16"`` or ``"f32"``); a graph
    with int8 nodes (an NNCF-quantized IR) runs those in int8 either way. The model is compiled once with
    dynamic batch and sequence axes; OpenVINO's CPU plugin caches its kernels per input shape itself (a new
    shape's first call costs one extra run's time). Not thread-safe: one infer request, reused.
    """

    def __init__(self, path: str | Path, threads: int | None = None, hint: str = "f32",
                 outputs: list[str] | None = None):  # fmt: skip
        ov = require("openvino")
        core = ov.Core()
        # LATENCY: one stream, all threads on one request, as the Predictor sends one batch at a time
        settings: dict[str, Any] = {"INFERENCE_PRECISION_HINT": hint, "PERFORMANCE_HINT": "LATENCY"}
        if threads:
            settings["INFERENCE_NUM_THREADS"] = threads
        self.path = Path(path)
        try:
            self.compiled = core.compile_model(core.read_model(str(path)), "CPU", settings)
        except RuntimeError as e:  # OpenVINO raises RuntimeError (conversion or compile failures)
            raise DataError(f"{path}: OpenVINO cannot load this graph ({str(e).strip().splitlines()[-1][:200]}); "
                            "export it again") from None  # fmt: skip
        # An output tensor can carry several names (the head's, and the node's that made it): keep them all.
        self.ports = {name: port for port in self.compiled.outputs for name in port.get_names()}
        self.input_names = [port.get_any_name() for port in self.compiled.inputs]
        self.hint = self.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()  # as OpenVINO took it
        missing = [name for name in outputs or [] if name not in self.ports]
        if missing:
            raise DataError(f"{path} has no output {', '.join(missing)}; export it again")
        self.output_names = outputs or [port.get_any_name() for port in self.compiled.outputs]
        self.request = self.compiled.create_infer_request()

    def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        out = self.request.infer(graph_feeds(batch, self.input_names))  # outputs are copies (share_outputs=False)
        return {name: out[self.ports[name]] for name in self.output_names}


class OpenVinoEngine(_Export):
    """An exported directory run by OpenVINO on the CPU.

    fp32 / bf16 run the fp32 graph of either ``--graph``: OpenVINO's ONNX frontend converts onnxruntime's
    Attention, FastGelu and SkipLayerNormalization, so the default export needs no other flag (every head
    matches torch to ~1e-6 in f32 on both graphs; at albert-base shape both run at the same speed).
    onnxruntime's int8 graph (QAttention) it cannot read; int8 here is the export's own OpenVINO file,
    ``model.openvino-int8.xml``, statically quantized by NNCF on calibration inputs
    (``albertlm export --quantize int8 --calibration FILE``): int8 activations as well as weights, which
    OpenVINO multiplies with VNNI / AMX int8 instructions.

    ``precision``: ``"int8"`` that file (its unquantized ops in bf16 where the CPU has it), ``"bf16"`` or
    ``"fp32"`` what the fp32 graph's matmuls and activations compute in; ``"auto"`` is int8 when the export
    has the file (that is why it was exported), else bf16 where the CPU computes it natively (AVX512-BF16 or
    AMX; OpenVINO's own default there), else fp32 (asking for bf16 there is an error). Measured on 2 shared
    cores of a Xeon with AMX, albert-base shape, seq 128: bf16 2-4x faster than f32, as fast as onnxruntime
    int8 or faster; f32 runs as onnxruntime fp32; int8 faster than both (docs/results/deploy). bf16 moves
    probabilities by ~3e-3 and QA scores by ~1% (the tolerances in tests/test_inference.py). Not
    thread-safe (the server calls its engine under one lock).
    """

    name = "openvino"

    def __init__(self, directory: str | Path, threads: int | None = None, precision: str = "auto"):
        ov = require("openvino")
        files = self._open_export(directory)
        native_bf16 = cpu_has_bf16(ov.Core())
        if precision not in ("auto", "fp32", "bf16", "int8"):
            raise UserError(f"--engine openvino computes in int8, bf16 or fp32, not {precision!r}")
        if precision == "bf16" and not native_bf16:
            raise UserError("this CPU does not compute bf16 natively (no AVX512-BF16 or AMX); use --precision fp32")
        if precision == "int8" and OPENVINO_INT8 not in files:
            raise FileNotFoundError(f"{directory} has no OpenVINO int8 file; export with --quantize int8 "
                                    "--calibration FILE (inputs like the ones you will serve)")  # fmt: skip
        int8 = precision == "int8" or (precision == "auto" and OPENVINO_INT8 in files)
        hint = "bf16" if precision == "bf16" or (precision in ("auto", "int8") and native_bf16) else "f32"
        self.session = OpenVinoSession(self.directory / files[OPENVINO_INT8 if int8 else "fp32"], threads, hint,
                                       list(self.head.outputs))  # fmt: skip
        self.path = self.session.path
        self.precision = "int8" if int8 else ("fp32" if self.session.hint == "f32" else self.session.hint)
        self._open_exits(lambda path, outputs: OpenVinoSession(path, threads, hint, outputs),
                         OPENVINO_INT8 if int8 else "fp32")  # fmt: skip

    def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        return self.session(batch)


def cpu_has_bf16(core: Any) -> bool:
    """Whether OpenVINO's CPU plugin computes bf16 natively here (AVX512-BF16 or AMX), as it reports it."""
    return "BF16" in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def _verify_export(directory: Path, manifest: dict) -> None:
    """Every file deploy.json lists has its recorded sha256 (exports before checksums are taken as they are)."""
    from albertlm.files import sha256

    sums = manifest.get("sha256", {})
    if not isinstance(sums, dict):
        raise DataError(f"{directory / MANIFEST_FILE}: damaged manifest (sha256 is not a table); export again")
    for name, digest in sums.items():
        if name == CARD:  # exports before the card left the checksums: documentation, not what the engines read
            continue
        f = inside(directory, name, f"{directory / MANIFEST_FILE} sha256", DataError)
        if not f.is_file() or sha256(f) != digest:
            raise DataError(f"{f} is missing or fails its checksum in {MANIFEST_FILE} (damaged, or an export was "
                            "interrupted); export again: albertlm export --model DIR --out DIR")


Engine = TorchEngine | OnnxEngine | OpenVinoEngine


def load_engine(directory: str | Path, engine: str = "torch", threads: int | None = None,
                precision: str = "auto", device: str = "auto") -> Engine:  # fmt: skip
    """``engine="torch"`` reads an HF-layout model dir; ``"onnx"`` and ``"openvino"`` an exported dir.

    ``precision`` is the one knob for every engine: ``auto`` (torch: bf16 where the CPU computes it
    natively, else fp32; onnx: the int8 graph when the export has one; openvino: its int8 file when the
    export has one, else as torch), ``fp32`` (always possible), ``bf16`` (torch, openvino) or ``int8``
    (onnx, openvino; an export made with --quantize int8, and --calibration for openvino). A precision an
    engine lacks is an error. ``device`` (``albertlm.devices``) places the torch engine; the exports run on the
    CPU, so a GPU asked of them is an error.
    """
    if engine not in ENGINES:
        raise UserError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
    if precision not in ENGINE_PRECISIONS:
        raise UserError(f"--precision must be one of {', '.join(ENGINE_PRECISIONS)}, not {precision!r}")
    lacks = {"torch": "int8", "onnx": "bf16", "executorch": "bf16"}.get(engine)
    if precision == lacks:
        hint = "int8 runs on an export: --engine onnx, openvino or executorch" if lacks == "int8" else (
            f"{engine} has no bf16 CPU kernels for this export; bf16 runs on --engine openvino or torch")
        raise UserError(f"--engine {engine} has no {precision}: {hint}")
    if engine != "torch" and parse_device(device).startswith("cuda"):
        raise UserError(f"--device {device}: --engine {engine} runs exports on the CPU here; use --engine torch on "
                        "the model folder for the GPU")  # fmt: skip
    if engine == "onnx":
        return OnnxEngine(directory, threads, precision)
    if engine == "openvino":
        return OpenVinoEngine(directory, threads, precision)
    if engine == "executorch":
        from albertlm.deploy.executorch import ExecuTorchEngine

        return ExecuTorchEngine(directory, threads, precision)
    return TorchEngine.load(directory, threads, precision, device)
