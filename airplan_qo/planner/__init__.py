"""The planner, above the cost models: it reads a workload's statistics from the catalog
(``statistics``), enumerates the plan space (``enumeration``, D-Cliques in ``clique_planning``),
costs every candidate with a cost model, prunes by a table of rules (``pruning``), chooses, honours
a restricted request's fallback (``restriction``), checks the data split first (``feasibility``),
reports the steps of a long call (``progress``) and records the run (``recording``). The driver is
:class:`airplan_qo.planner.optimizer.Optimizer`; what it is asked and answers are plan values
(:mod:`airplan_qo.plans.request`).
"""
