"""Config validation, the list of cells, and path helpers shared by every stage."""

import json
import shlex
from pathlib import Path

from snakemake.utils import validate

validate(config, schema="../schemas/config.schema.yaml")

RESULTS = config["results"].rstrip("/")
STUDY = config["study"]
TRACKING = config.get("tracking", {}) or {}
BACKEND = config.get("backend", {}) or {}
TRIALS = int(config["trials"])
SHARDS = int(config.get("trial_shards", 1))
if SHARDS > TRIALS:
    raise ValueError(f"config: trial_shards ({SHARDS}) must not exceed trials ({TRIALS})")
LOGS = f"{RESULTS}/logs"
#: Threads of the CPU-heavy jobs (training, quantization, in-process inference); Snakemake
#: scales them down to --cores. Not workflow.cores: that is undefined under --report and SLURM.
THREADS = int(config.get("threads_per_job", 2))

# Software of each rule, for --sdm conda / --sdm apptainer (paths relative to workflow/rules/).
# CPU stages use the runtime environment; inference and quantization the GPU one. The images
# are built from containers/ (see docs/scale-out.md); config.containers names where they are.
CONTAINERS = config.get("containers", {}) or {}
CONDA_ENV = "../../envs/flatscore.yaml"
GPU_CONDA_ENV = "../../envs/inference.yaml"
CONTAINER = CONTAINERS.get("runtime", "containers/flatscore-runtime.sif")
GPU_CONTAINER = CONTAINERS.get("inference", "containers/flatscore-inference.sif")


wildcard_constraints:
    precision="full|int8|int4",
    repair="on|off",
    budget=r"\d+",
    shard=r"\d+",
    domain="|".join(config["domains"]),
    model="|".join(config["models"]),


def repair_label(flag):
    return "on" if flag else "off"


def shard_trials(shard):
    """(first trial, number of trials) of a trial shard: trials are split as evenly as possible."""
    shard = int(shard)
    base, extra = divmod(TRIALS, SHARDS)
    first = shard * base + min(shard, extra)
    return first, base + (1 if shard < extra else 0)


def cell_dir(model, precision, domain, budget, repair, shard):
    return f"{RESULTS}/cells/{model}/{precision}/{domain}/K{budget}/repair-{repair}/shard{shard}"


def all_cells():
    """Every cell of model x precision x domain x budget x repair x trial shard."""
    cells = []
    for model in config["models"]:
        for precision in config["precisions"]:
            for domain in config["domains"]:
                for budget in config["budgets"]:
                    for repair in config["repair"]:
                        for shard in range(SHARDS):
                            cells.append(cell_dir(model, precision, domain, budget, repair_label(repair), shard))
    return cells


def domain_data(domain):
    """The domain's data folder: a user's tau2-bench checkout, or the generated synthetic one."""
    spec = config["domains"][domain]
    if spec["source"] == "path":
        return spec["path"]
    return f"{RESULTS}/data/{domain}"


def domain_marker(domain):
    spec = config["domains"][domain]
    if spec["source"] == "path":
        return []
    return f"{RESULTS}/data/{domain}/tasks.json"


def model_spec(model):
    return config["models"][model]


def model_path(model, precision):
    """Where the model of a precision lives: a folder the workflow made, or a named checkpoint."""
    spec = model_spec(model)
    if precision != "full" and precision in (spec.get("quantized") or {}):
        return spec["quantized"][precision]
    if spec["kind"] == "hf" and precision == "full":
        return spec["id"]
    return f"{RESULTS}/models/{model}/{precision}"


def model_marker(model, precision):
    """The file a model rule leaves (none for a named checkpoint the workflow does not build)."""
    spec = model_spec(model)
    if precision != "full" and precision in (spec.get("quantized") or {}):
        return []
    if spec["kind"] == "hf" and precision == "full":
        return []
    return f"{RESULTS}/models/{model}/{precision}/flatscore_manifest.json"


def tracking_uri_arg():
    uri = TRACKING.get("uri")
    return f"--tracking-uri {uri}" if uri else ""


#: One server per (model, precision), shared by all its episode shards (a service job in the
#: "inference" group), unless backend.shared_server is false (then each job serves its own).
SHARED_SERVER = bool(BACKEND.get("serve")) and not BACKEND.get("base_url") and BACKEND.get("shared_server", True)


def server_announcement(model, precision):
    return f"{RESULTS}/serving/{model}/{precision}/server.json"


def server_args():
    """The serve flags (``flatscore serve`` and ``flatscore episodes --serve``) from backend config."""
    vllm = BACKEND.get("vllm", {}) or {}
    args = [f"--serve {BACKEND['serve']}"]
    if "gpu_memory_utilization" in vllm:
        args.append(f"--vllm-gpu-memory-utilization {vllm['gpu_memory_utilization']}")
    if "max_model_len" in vllm:
        args.append(f"--vllm-max-model-len {vllm['max_model_len']}")
    if "tensor_parallel_size" in vllm:
        args.append(f"--vllm-tensor-parallel-size {vllm['tensor_parallel_size']}")
    args.extend(f"--vllm-arg={a}" for a in vllm.get("extra_args", []))
    return " ".join(args)


def episodes_args(wc):
    spec = model_spec(wc.model)
    first, count = shard_trials(wc.shard)
    args = [
        f"--domain {wc.domain}",
        f"--data {domain_data(wc.domain)}",
        f"--budget {wc.budget}",
        f"--trials {count}",
        f"--first-trial {first}",
        f"--seed {config['seed']}",
        f"--max-steps {config.get('max_steps', 200)}",
        f"--study {STUDY}",
        f"--experiment {TRACKING.get('experiment', STUDY)}",
        "--agent llm",
        f"--model {model_path(wc.model, wc.precision)}",
        f"--model-name {wc.model}",
        f"--precision {wc.precision}",
        f"--backend {BACKEND.get('kind', 'transformers')}",
        f"--max-in-flight {BACKEND.get('max_in_flight', 8)}",
        f"--max-new-tokens {BACKEND.get('max_new_tokens', 256)}",
        f"--prompt {spec.get('prompt', 'compact' if spec['kind'] == 'demo' else 'full')}",
        "--log-mlflow --no-progress --supersede",
    ]
    if config.get("split"):
        args.append(f"--split {config['split']}")
    if config.get("tasks_per_domain"):
        args.append(f"--tasks first:{config['tasks_per_domain']}")
    if wc.repair == "on":
        args.append("--repair")
    if config.get("tau2_compat"):
        args.append("--tau2-compat")
    if BACKEND.get("base_url"):
        args.append(f"--base-url {BACKEND['base_url']}")
    elif SHARED_SERVER:
        args.append(f"--base-url-file {server_announcement(wc.model, wc.precision)}")
    elif BACKEND.get("serve"):
        args.append(server_args())
    if spec.get("served_model"):
        args.append(f"--served-model {spec['served_model']}")
    uri = tracking_uri_arg()
    if uri:
        args.append(uri)
    return " ".join(args)
