"""Config validation, the list of cells, and path helpers shared by every stage.

Every default lives in workflow/schemas/config.schema.yaml, and only there: validate() fills each
one into ``config``, so the rules read ``config[key]`` and carry no default of their own.
"""

import json
import shlex
from pathlib import Path

from snakemake.utils import validate

validate(config, schema="../schemas/config.schema.yaml")

RESULTS = config["results"].rstrip("/")
STUDY = config["study"]
TRACKING = config["tracking"]
BACKEND = config["backend"]
TRIALS = config["trials"]
SHARDS = config["trial_shards"]
if SHARDS > TRIALS:
    raise ValueError(f"config: trial_shards ({SHARDS}) must not exceed trials ({TRIALS})")
LOGS = f"{RESULTS}/logs"
#: Threads of the CPU-heavy jobs (training, quantization, in-process inference); Snakemake
#: scales them down to --cores. Not workflow.cores: that is undefined under --report and SLURM.
THREADS = config["threads_per_job"]

# Software of each rule, for --sdm conda / --sdm apptainer (paths relative to workflow/rules/).
# CPU stages use the runtime environment; inference and quantization the GPU one. The images
# are built from containers/ (see docs/scale-out.md); config.containers names where they are.
CONDA_ENV = "../../envs/flatscore.yaml"
GPU_CONDA_ENV = "../../envs/inference.yaml"
CONTAINER = config["containers"]["runtime"]
GPU_CONTAINER = config["containers"]["inference"]


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
    if precision != "full" and precision in spec["quantized"]:
        return spec["quantized"][precision]
    if spec["kind"] == "hf" and precision == "full":
        return spec["id"]
    return f"{RESULTS}/models/{model}/{precision}"


def model_marker(model, precision):
    """The file a model rule leaves (none for a named checkpoint the workflow does not build)."""
    spec = model_spec(model)
    if precision != "full" and precision in spec["quantized"]:
        return []
    if spec["kind"] == "hf" and precision == "full":
        return []
    return f"{RESULTS}/models/{model}/{precision}/flatscore_manifest.json"


def tracking_uri_arg():
    uri = TRACKING["uri"]
    return f"--tracking-uri {uri}" if uri else ""


#: One server per (model, precision), shared by all its episode shards (a service job in the
#: "inference" group), unless backend.shared_server is false (then each job serves its own).
SHARED_SERVER = bool(BACKEND["serve"]) and not BACKEND["base_url"] and BACKEND["shared_server"]


def server_announcement(model, precision):
    return f"{RESULTS}/serving/{model}/{precision}/server.json"


def server_args():
    """The serve flags (``flatscore serve`` and ``flatscore episodes --serve``) from backend config."""
    vllm = BACKEND["vllm"]  # a setting left out keeps vLLM's own default: no flag
    args = [f"--serve {BACKEND['serve']}"]
    if "gpu_memory_utilization" in vllm:
        args.append(f"--vllm-gpu-memory-utilization {vllm['gpu_memory_utilization']}")
    if "max_model_len" in vllm:
        args.append(f"--vllm-max-model-len {vllm['max_model_len']}")
    if "tensor_parallel_size" in vllm:
        args.append(f"--vllm-tensor-parallel-size {vllm['tensor_parallel_size']}")
    args.extend(f"--vllm-arg={a}" for a in vllm["extra_args"])
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
        f"--max-steps {config['max_steps']}",
        f"--study {STUDY}",
        f"--experiment {TRACKING['experiment']}",
        "--agent llm",
        f"--model {model_path(wc.model, wc.precision)}",
        f"--model-name {wc.model}",
        f"--precision {wc.precision}",
        f"--backend {BACKEND['kind']}",
        f"--max-in-flight {BACKEND['max_in_flight']}",
        f"--max-new-tokens {BACKEND['max_new_tokens']}",
        f"--prompt {spec['prompt']}",
        "--log-mlflow --no-progress --supersede",
    ]
    if config["split"]:
        args.append(f"--split {config['split']}")
    if config["tasks_per_domain"]:
        args.append(f"--tasks first:{config['tasks_per_domain']}")
    if wc.repair == "on":
        args.append("--repair")
    if config["tau2_compat"]:
        args.append("--tau2-compat")
    if BACKEND["base_url"]:
        args.append(f"--base-url {BACKEND['base_url']}")
    elif SHARED_SERVER:
        args.append(f"--base-url-file {server_announcement(wc.model, wc.precision)}")
    elif BACKEND["serve"]:
        args.append(server_args())
    if spec["served_model"]:
        args.append(f"--served-model {spec['served_model']}")
    uri = tracking_uri_arg()
    if uri:
        args.append(uri)
    return " ".join(args)
