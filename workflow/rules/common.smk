"""Config validation, the list of cells, and path helpers shared by every stage.

Every default lives in workflow/schemas/config.schema.yaml, and only there: validate() fills each
one into ``config``, so the rules read ``config[key]`` and carry no default of their own.

Every path is written once, as the output of the rule that makes it; a later stage names it as
``rules.<rule>.output.<key>`` (filled in with ``expand`` where it has wildcards).
"""

import itertools
import json
import re
import shlex
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from flatscore.config_checks import domain_problems, file_problems, user_problems
from flatscore.engine.cell_folder import METRICS_FILE
from flatscore.models.schemes import SCHEMES as QUANT_SCHEMES
from flatscore.serving_checks import serving_problems


def config_problem(config, schema_path):
    """The first schema violation of ``config`` as one line naming the key, or None.

    snakemake.utils.validate reports a violation with the whole schema (hundreds of lines); the
    user needs the key and what was expected.
    """
    import jsonschema
    import yaml

    schema = yaml.safe_load(Path(schema_path).read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(config), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    error = jsonschema.exceptions.best_match(errors)
    where = ".".join(str(part) for part in error.absolute_path) or "(top level)"
    return f"config: {where}: {error.message}"


_problem = config_problem(config, Path(workflow.current_basedir) / ".." / "schemas" / "config.schema.yaml")
if _problem:
    raise WorkflowError(_problem)
validate(config, schema="../schemas/config.schema.yaml")
# What the schema cannot see (folders that must exist, outputs that must be writable, task kinds
# only where a generator draws them), before any job
_problem = next(itertools.chain(file_problems(config), domain_problems(config), user_problems(config)), None)
if _problem:
    raise WorkflowError(_problem)
# What the configured server cannot load or run (vLLM's CPU build), before any job. A checkpoint
# named under models.<name>.quantized says nothing of its scheme and is not checked.
_problem = next(iter(serving_problems(config)), None)
if _problem:
    raise WorkflowError(_problem)

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
#: The requirements of vLLM's CPU environment (a file of the checkout, wherever the study runs).
VLLM_CPU_REQUIREMENTS = str(Path(workflow.basedir) / "envs" / "vllm-cpu.txt")
CONTAINER = config["containers"]["runtime"]
GPU_CONTAINER = config["containers"]["inference"]
#: The file every model folder the workflow builds holds: flatscore.models.manifest.MANIFEST_NAME,
#: written out because importing flatscore.models loads torch (seconds on every parse).
MANIFEST_FILE = "flatscore_manifest.json"


wildcard_constraints:
    precision="full|int8|int4|fp8",
    repair="on|off",
    budget=r"\d+",
    shard=r"\d+",
    replicate=r"[1-9]\d*",
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


#: The models evaluated as arms (role agent); a model of role user only plays the user simulator.
AGENT_MODELS = [name for name, spec in config["models"].items() if spec["role"] == "agent"]


def all_cells(pattern):
    """``pattern`` (a cell's file, rules.episodes.output.<key>) for every cell of
    model x precision x domain x budget x repair x trial shard, in that order."""
    return [
        expand(pattern, model=m, precision=p, domain=d, budget=b, repair=repair_label(r), shard=s)[0]
        for m, p, d, b, r, s in itertools.product(
            AGENT_MODELS,
            config["precisions"],
            config["domains"],
            config["budgets"],
            config["repair"],
            range(SHARDS),
        )
    ]


#: A/A noise floor: replicates 1..REPLICATES of every cell of the reference precision (full).
REPLICATES = config["replicates"]
REFERENCE_PRECISION = "full"


def replicate_cells(pattern):
    """``pattern`` (rules.episodes_replicate.output.<key>) for every replicate of every full-precision
    cell, in all_cells' order; none when ``replicates`` is 0 or full precision is not run."""
    if REFERENCE_PRECISION not in config["precisions"]:
        return []
    return [
        expand(
            pattern,
            model=m,
            precision=REFERENCE_PRECISION,
            domain=d,
            budget=b,
            repair=repair_label(r),
            shard=s,
            replicate=n,
        )[0]
        for n, m, d, b, r, s in itertools.product(
            range(1, REPLICATES + 1),
            AGENT_MODELS,
            config["domains"],
            config["budgets"],
            config["repair"],
            range(SHARDS),
        )
    ]


def domain_marker(domain):
    """The generated domain's tasks file (rule generate_domain); none for a user's data folder."""
    if config["domains"][domain]["source"] == "path":
        return []
    return expand(rules.generate_domain.output.tasks, domain=domain)[0]


def domain_data(domain):
    """The domain's data folder: a user's tau2-bench checkout, or the generated synthetic one."""
    spec = config["domains"][domain]
    if spec["source"] == "path":
        return spec["path"]
    return str(Path(domain_marker(domain)).parent)


def model_spec(model):
    return config["models"][model]


def named_checkpoint(model, precision):
    """The checkpoint the config names for a model's precision (an hf model's id for full, an entry of
    its ``quantized`` otherwise), or None: the workflow builds that model (a GGUF file is converted)."""
    spec = model_spec(model)
    if precision == "full":
        return spec["id"] if spec["kind"] == "hf" and "id" in spec else None
    return spec["quantized"][precision] if precision in spec["quantized"] else None


def models_matching(predicate):
    """A wildcard regex of the model names whose spec satisfies ``predicate`` (one that matches no
    name where there is none): train_demo and import_gguf write the same ``full`` path, each for its own models."""
    names = [re.escape(m) for m, spec in config["models"].items() if predicate(spec)]
    return "|".join(names) if names else "(?!)"


#: The models whose full precision the import_gguf rule converts from a GGUF file.
GGUF_MODELS = models_matching(lambda spec: spec["kind"] == "hf" and "gguf" in spec)
#: The models the train_demo rule trains.
DEMO_MODELS = models_matching(lambda spec: spec["kind"] == "demo")


def model_marker(model, precision):
    """The manifest a model rule leaves (train_demo, import_gguf, quantize); none for a named checkpoint."""
    if named_checkpoint(model, precision) is not None:
        return []
    if precision == "full" and "gguf" in model_spec(model):
        return expand(rules.import_gguf.output.manifest, model=model)[0]
    if precision == "full":
        return expand(rules.train_demo.output.manifest, model=model)[0]
    return expand(rules.quantize.output.manifest, model=model, precision=precision)[0]


def calibration_input(wc):
    """The expert demonstrations AWQ calibrates on; none for a data-free scheme (no job waits for them)."""
    if not QUANT_SCHEMES[config["quantization"][wc.precision]["scheme"]].calibrated:
        return []
    return expand(rules.expert_demos.output.demos, model=wc.model)[0]


def model_path(model, precision):
    """Where the model of a precision lives: a named checkpoint, or the folder the workflow made."""
    named = named_checkpoint(model, precision)
    return named if named is not None else str(Path(model_marker(model, precision)).parent)


def tracking_uri_arg():
    uri = TRACKING["uri"]
    return f"--tracking-uri {uri}" if uri else ""


def where_the_results_are():
    """The lines a finished run ends with: a newcomer should not have to search for the results."""
    summary = Path(RESULTS) / "aggregate" / "summary.md"
    if not summary.exists():
        return ""
    ui = f"flatscore ui --results {RESULTS}" + (f" --tracking-uri {TRACKING['uri']}" if TRACKING["uri"] else "")
    return "\n".join(
        [
            "",
            "flatscore: the study is done.",
            f"  the answer and its figures:  {RESULTS}/report/index.md (summary: {summary})",
            f"  every table (CSV):           {RESULTS}/aggregate/",
            f"  every cell's episodes:       {RESULTS}/cells/<model>/<precision>/<domain>/K<budget>/<repair>/",
            f"  browse the runs in MLflow:   {ui}   (experiment '{TRACKING['experiment']}', http://127.0.0.1:5000)",
        ]
    )


#: One server per (model, precision), shared by all its episode shards (a service job in the
#: "inference" group), unless backend.shared_server is false (then each job serves its own).
SHARED_SERVER = bool(BACKEND["serve"]) and not BACKEND["base_url"] and BACKEND["shared_server"]


#: vLLM's CPU build runs from its own environment, built once per machine by the vllm_env rule.
VLLM_ON_CPU = BACKEND["serve"] == "vllm" and BACKEND["vllm"]["device"] == "cpu"


def vllm_env_marker():
    """The vllm_env rule's output where the study serves with vLLM on the CPU, else nothing."""
    return [f"{RESULTS}/envs/vllm-cpu.json"] if VLLM_ON_CPU else []


def server_args(model):
    """The serve flags (``flatscore serve`` and ``flatscore episodes --serve``): the backend's
    vLLM settings and the model's own serving settings; a setting left out passes no flag."""
    vllm = BACKEND["vllm"]
    serving = model_spec(model)["serving"]
    args = [f"--serve {BACKEND['serve']}", f"--tool-call-parser {serving['tool_call_parser']}"]
    if BACKEND["serve"] == "vllm":
        args.append(f"--vllm-device {vllm['device']}")
    if VLLM_ON_CPU:
        args.append(f"--vllm-venv {vllm['venv']} --vllm-kv-cache-gib {vllm['kv_cache_gib']}")
    if serving["dtype"] != "auto":
        args.append(f"--server-dtype {serving['dtype']}")
    if serving["chat_template"]:
        args.append(f"--chat-template {serving['chat_template']}")
    if serving["reasoning_parser"]:
        args.append(f"--reasoning-parser {serving['reasoning_parser']}")
    # a setting left out of backend.vllm has no default of ours: vLLM keeps its own
    max_model_len = serving["max_model_len"] or (vllm["max_model_len"] if "max_model_len" in vllm else None)
    if max_model_len:
        args.append(f"--vllm-max-model-len {max_model_len}")
    if "gpu_memory_utilization" in vllm:
        args.append(f"--vllm-gpu-memory-utilization {vllm['gpu_memory_utilization']}")
    if "tensor_parallel_size" in vllm:
        args.append(f"--vllm-tensor-parallel-size {vllm['tensor_parallel_size']}")
    args.extend(f"--vllm-arg={a}" for a in [*vllm["extra_args"], *serving["extra_args"]])
    return " ".join(args)


#: The user simulator, one for every arm. An LLM user named by ``user.model`` is served at full
#: precision through the serve mechanism: a service job must share its consumers' group, and
#: one user server for every arm would join all arms (and all their servers) into one group
#: job, so each arm's group gets its own instance of the same user (serve_user), and the arm
#: that is the user's own model at full precision talks to its agent's server.
USER = config["user"]
SERVED_USER = USER["kind"] == "llm" and bool(USER["model"])


def user_served_name():
    """The user model's name at its server (that model's served_model, else its path or id)."""
    if not SERVED_USER:
        return USER["served_model"]
    return model_spec(USER["model"])["served_model"] or model_path(USER["model"], "full")


def user_server_announce(wc):
    """The announcement of the user's server for this arm's group; none without a served user."""
    if not SERVED_USER:
        return []
    if SHARED_SERVER and (wc.model, wc.precision) == (USER["model"], "full"):
        return expand(rules.serve_model.output.announce, model=wc.model, precision=wc.precision)
    return expand(rules.serve_user.output.announce, model=wc.model, precision=wc.precision)


def user_args(input):
    """The episodes flags of the user simulator; none for the scripted user (every existing
    command, hence every existing cell, stays as it was)."""
    if USER["kind"] != "llm":
        return []
    if SERVED_USER:
        where = f"--user-base-url-file {input.user_server}"
    else:
        where = f"--user-base-url {USER['base_url']}"
    args = [
        "--user llm",
        where,
        f"--user-model {user_served_name()}",
        f"--user-temperature {USER['temperature']}",
        f"--user-max-new-tokens {USER['max_new_tokens']}",
    ]
    if USER["prompt"]:
        args.append(f"--user-prompt {USER['prompt']}")
    return args


def episodes_args(wc, input):
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
    if BACKEND["temperature"]:  # greedy (0) keeps the command, hence every existing cell, as it was
        args.append(f"--temperature {BACKEND['temperature']}")
    if config["tasks_per_domain"]:
        args.append(f"--tasks first:{config['tasks_per_domain']}")
    if wc.repair == "on":
        args.append("--repair")
    if config["tau2_compat"]:
        args.append("--tau2-compat")
    if config["nl_judge_base_url"]:
        args.append(f"--judge-base-url {config['nl_judge_base_url']}")
        args.append(f"--judge-model {config['nl_judge_model']}")
    if config["tau2_checkout"]:
        args.append(f"--tau2-checkout {config['tau2_checkout']}")
    if BACKEND["base_url"]:
        args.append(f"--base-url {BACKEND['base_url']}")
    elif SHARED_SERVER:
        args.append(f"--base-url-file {input.server}")
    elif BACKEND["serve"]:
        args.append(server_args(wc.model))
    if spec["served_model"]:
        args.append(f"--served-model {spec['served_model']}")
    args.extend(user_args(input))
    uri = tracking_uri_arg()
    if uri:
        args.append(uri)
    return " ".join(args)
