"""`ji.analyze`: the whole identifiability answer of a model or a problem
(`_analyze`), and its result and text report (`_result`: `ji.Report`).

Imports every layer below it.
"""
