"""Report stage: one :class:`~advisor.report.model.Report` document, rendered as text, Markdown, HTML or JSON."""
