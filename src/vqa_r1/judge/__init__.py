"""Reasoning-answer alignment: an LLM (or offline heuristic) judge, its statistics and agreement.

The study this reproduces asked o4-mini item by item with no cache; the modules here make that a
repeatable, cheap tool: ``responses`` reads and splits outputs, ``prompts`` holds versioned
templates, ``client`` talks to any OpenAI-compatible endpoint, ``cache`` and ``cost`` make reruns
free and bounded, ``stats`` and ``agreement`` turn verdicts into the study's tables.
"""
