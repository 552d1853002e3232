"""flatscore: what 4-bit quantization does to multi-turn LLM agents, as a Snakemake study.

snakemake --cores all                         # the embedded default (config/config.yaml)
snakemake --cores all --configfile config/paper.yaml --profile profiles/slurm
"""

from snakemake.utils import min_version

min_version("9.0")


# A study config given with --configfile replaces the embedded default instead of merging into
# it (Snakemake's configfile directive would merge: paper.yaml would still plan the demo model).
if not workflow.overwrite_configfiles:
    workflow.configfile("config/config.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/quantize.smk"
include: "workflow/rules/episodes.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        summary=rules.aggregate.output.summary,
        report=rules.report.output.index,
        tracking=rules.sync_tracking.output.counts,


onsuccess:
    print(where_the_results_are())
