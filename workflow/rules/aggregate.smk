"""Statistics over all cells: comparisons, amplification, stability, budget curves, repair, power,
exact paired tests, the A/A noise floor and first divergence; logged to the study's MLflow run."""


rule aggregate:
    input:
        metrics=all_cells(rules.episodes.output.metrics) + replicate_cells(rules.episodes_replicate.output.metrics),
        store=rules.tracking_store.output.ready,
    output:
        summary=report(f"{RESULTS}/aggregate/summary.md", category="Summary"),
        success=report(f"{RESULTS}/aggregate/success.csv", category="Tables"),
        comparisons=report(f"{RESULTS}/aggregate/comparisons.csv", category="Tables"),
        amplification=report(f"{RESULTS}/aggregate/amplification.csv", category="Tables"),
        budget_curves=report(f"{RESULTS}/aggregate/budget_curves.csv", category="Tables"),
        counterfactual=report(f"{RESULTS}/aggregate/counterfactual.csv", category="Tables"),
        plots=report(
            directory(f"{RESULTS}/aggregate/plots"),
            patterns=["{name}.png"],
            category="Plots",
        ),
    log:
        f"{LOGS}/aggregate.log",
    conda:
        CONDA_ENV
    container:
        CONTAINER
    params:
        cells=lambda wc, input: " ".join(str(Path(m).parent) for m in input.metrics),
        window=config["analysis"]["divergence_window"],
        tracking=f"--log-mlflow --study {STUDY} --experiment {TRACKING['experiment']} {tracking_uri_arg()}",
        study=shlex.quote(json.dumps(config, sort_keys=True)),
        margin=config["analysis"]["equivalence_margin"],
        out=lambda wc, output: str(Path(output.summary).parent),
        gaps=" ".join(str(g) for g in config["analysis"]["power_gaps"]),
    shell:
        "flatscore aggregate --cells {params.cells} --out {params.out} --config {params.study} "
        "--equivalence-margin {params.margin} --power-gaps {params.gaps} --divergence-window {params.window} "
        "{params.tracking} > {log} 2>&1"
