"""Domains and the full-precision models: generate data, record expert demonstrations, train the
demo model, convert a GGUF file into a Hugging Face folder."""


rule generate_domain:
    output:
        tasks=f"{RESULTS}/data/{{domain}}/tasks.json",
    log:
        f"{LOGS}/generate_domain/{{domain}}.log",
    conda:
        CONDA_ENV
    container:
        CONTAINER
    params:
        out=lambda wc, output: str(Path(output.tasks).parent),
        seed=lambda wc: config["domains"][wc.domain]["seed"],
        n_tasks=lambda wc: config["domains"][wc.domain]["n_tasks"],
        ids=lambda wc: config["domains"][wc.domain]["ids"],
        identities=lambda wc: config["domains"][wc.domain]["identities"],
        user_details=lambda wc: config["domains"][wc.domain]["user_details"],
        kinds=lambda wc: (
            f"--task-kinds {','.join(config['domains'][wc.domain]['task_kinds'])}"
            if config["domains"][wc.domain]["task_kinds"]
            else ""
        ),
    shell:
        "flatscore generate-domain --domain {wildcards.domain} --out {params.out} "
        "--seed {params.seed} --n-tasks {params.n_tasks} --ids {params.ids} --identities {params.identities} "
        "--user-details {params.user_details} "
        "{params.kinds} > {log} 2>&1"


rule expert_demos:
    input:
        data=[domain_marker(d) for d in config["domains"]],
    output:
        demos=f"{RESULTS}/demos/{{model}}.jsonl",
    log:
        f"{LOGS}/expert_demos/{{model}}.log",
    conda:
        CONDA_ENV
    container:
        CONTAINER
    params:
        domains=lambda wc: " ".join(f"--domain {d}={domain_data(d)}" for d in config["domains"]),
        prompt=lambda wc: model_spec(wc.model)["prompt"],
        augment=lambda wc: model_spec(wc.model)["augment_dbs"],
        slip_rate=lambda wc: model_spec(wc.model)["slip_rate"],
        identities=lambda wc: model_spec(wc.model)["augment_identities"],
        answer_form=lambda wc: model_spec(wc.model)["answer_form"],
    shell:
        "flatscore demos {params.domains} --split train --prompt {params.prompt} --augment-dbs {params.augment} "
        "--augment-identities {params.identities} --answer-form {params.answer_form} --slip-rate {params.slip_rate} "
        "--out {output.demos} > {log} 2>&1"


rule train_demo:
    input:
        demos=rules.expert_demos.output.demos,
    output:
        manifest=f"{RESULTS}/models/{{model}}/full/{MANIFEST_FILE}",
    log:
        f"{LOGS}/train_demo/{{model}}.log",
    wildcard_constraints:
        model=DEMO_MODELS,
    conda:
        CONDA_ENV
    container:
        CONTAINER
    threads: THREADS
    resources:
        mem_mb=4000,
    params:
        out=lambda wc, output: str(Path(output.manifest).parent),
        size=lambda wc: model_spec(wc.model)["size"],
        seed=lambda wc: model_spec(wc.model)["seed"],
        limits=lambda wc: " ".join(
            f"--{key.replace('_', '-')} {model_spec(wc.model)[key]}"
            for key in ("steps", "max_seconds")
            if model_spec(wc.model)[key] is not None
        ),
    shell:
        "flatscore train-demo --demos {input.demos} --out {params.out} --size {params.size} "
        "--seed {params.seed} {params.limits} 2>&1 | tee {log}"


rule import_gguf:
    input:
        gguf=lambda wc: model_spec(wc.model)["gguf"],
    output:
        manifest=f"{RESULTS}/models/{{model}}/full/{MANIFEST_FILE}",
    log:
        f"{LOGS}/import_gguf/{{model}}.log",
    wildcard_constraints:
        model=GGUF_MODELS,
    conda:
        CONDA_ENV
    container:
        CONTAINER
    threads: THREADS
    resources:
        mem_mb=8000,
    params:
        out=lambda wc, output: str(Path(output.manifest).parent),
        sha256=lambda wc: (
            f"--sha256 {model_spec(wc.model)['gguf_sha256']}" if "gguf_sha256" in model_spec(wc.model) else ""
        ),
    shell:
        "flatscore import-gguf --gguf {input.gguf} --out {params.out} {params.sha256} 2>&1 | tee {log}"
