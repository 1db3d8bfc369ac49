"""Reports from finished runs: tables (Markdown, CSV, LaTeX), training and accuracy plots, and the
published study's scores as a reference table.

Everything here is deterministic byte for byte (same input, same files), so regenerated reports
diff cleanly under version control, and written atomically, so a killed job never leaves a torn
table or image. The modules import only the base modules plus pandas; matplotlib is imported
inside the plotting functions so that ``vqa-r1 --help`` stays fast.
"""
