"""The command line: typer commands grouped by job, option parsing and the error boundary.

The top layer: each command parses, calls one function of a lower layer, prints. Nothing
outside `mushroom.cli.app.app` (and `mushroom.__main__`) imports it. Only this package (and
the HTML report) draws with rich: runs report through `mushroom.runs.reporter.Reporter`, which
`cli.tables.RichReporter` renders.
"""
