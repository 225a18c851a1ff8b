"""Rule engine: rules as data files, evaluated safely over declared metrics.

Public API:

* :func:`advisor.engine.evaluate.diagnose` -- ``diagnose(metrics, config=None) -> Diagnosis``;
* :class:`advisor.engine.model.EngineConfig` -- rule selection (ruff's select/ignore/preview);
* :func:`advisor.engine.rules.default_rules` / :func:`~advisor.engine.rules.load_rules` -- the
  :class:`~advisor.engine.ruleset.RuleSet` loaded from ``rules/`` (checkout) or the wheel.

Submodules are imported on use (``from advisor.engine.evaluate import diagnose``) so importing
the package stays cheap.
"""
