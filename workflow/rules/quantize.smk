"""Quantize each model per precision with llmcompressor: AWQ for the weight-only schemes (calibrated on
train-split dialogues), round-to-nearest and data-free for the W8A8 presets (w8a8, fp8_dynamic)."""


rule quantize:
    input:
        full=lambda wc: model_marker(wc.model, "full"),
        calibration=calibration_input,
    output:
        manifest=f"{RESULTS}/models/{{model}}/{{precision}}/{MANIFEST_FILE}",
    log:
        f"{LOGS}/quantize/{{model}}-{{precision}}.log",
    wildcard_constraints:
        precision="int8|int4|fp8",
    conda:
        GPU_CONDA_ENV
    container:
        GPU_CONTAINER
    threads: THREADS
    resources:
        mem_mb=8000,
    params:
        source=lambda wc: model_path(wc.model, "full"),
        out=lambda wc, output: str(Path(output.manifest).parent),
        scheme=lambda wc: config["quantization"][wc.precision]["scheme"],
        group_size=lambda wc: config["quantization"][wc.precision]["group_size"],
        calibration=lambda wc, input: f"--calibration {input.calibration} " if input.calibration else "",
        n_calibration=config["quantization"]["n_calibration"],
    shell:
        "flatscore quantize --model {params.source} --out {params.out} --scheme {params.scheme} "
        "--group-size {params.group_size} {params.calibration}"
        "--n-calibration {params.n_calibration} 2>&1 | tee {log}"
