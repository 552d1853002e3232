"""The study's report: the summary with its plots, plus Snakemake's own HTML (``snakemake --report``)."""


report: "../report/workflow.rst"


rule report:
    input:
        summary=rules.aggregate.output.summary,
        plots=rules.aggregate.output.plots,
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
