"""Analysis of result cells: loading, paired statistics, plots and the aggregate report."""

from flatscore.analysis.load import CorruptRecordError, StudyData, find_cell_dirs, load_cells
from flatscore.analysis.report import aggregate
from flatscore.analysis.stats import counterfactual_agreement, pass_hat_k

__all__ = ["CorruptRecordError", "StudyData", "aggregate", "counterfactual_agreement", "find_cell_dirs",
           "load_cells", "pass_hat_k"]
