"""Source transformations that belong to one fix each, named by its id.

A catalog fix whose permanent change is more than :class:`~advisor.fixes.diff_plan.DiffPlan`'s
generic primitives hands a :class:`~advisor.fixes.diff_plan.SourceEdit` to the plan; the edit
imports its transformation from here when it runs, so the catalog itself stays free of libcst.
Each module imports libcst and the generic helpers of :mod:`advisor.fixes.diff_edits`, never torch.
"""
