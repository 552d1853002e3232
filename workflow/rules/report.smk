"""The study's report: the summary with its plots, plus Snakemake's own HTML (``snakemake --report``)."""


report: "../report/workflow.rst"


rule report:
    input:
        summary=f"{RESULTS}/aggregate/summary.md",
        plots=f"{RESULTS}/aggregate/plots",
    output:
        index=f"{RESULTS}/report/index.md",
    log:
        f"{LOGS}/report.log",
    conda:
        CONDA_ENV
    container:
        CONTAINER
    params:
        aggregate=lambda wc, input: str(Path(input.summary).parent),
    shell:
        "flatscore report --aggregate {params.aggregate} --out {output.index} > {log} 2>&1"
