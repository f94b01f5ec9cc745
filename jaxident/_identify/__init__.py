"""The identifiability methods of the seed papers: column subset selection on the
sensitivity matrix (`_css`), estimability from delay coordinates (`_delay`,
`_delay_jacobian`, `_estimability`), L-SERC and parameter reduction over samples
(`_lserc`, `_lserc_method`, `_reduction`), set-by-set and one-by-one selection with
re-estimation (`_stepwise*`), SCE checks of reduced-order models (`_perturb`,
`_rom`), and the batched sweeps over samples that they and users run (`_sweep`, with
its result files in `_sweep_files`).

Imports every layer below it: `_runtime`, `_linalg`, `_model`, `_solve`, `_problem`,
`_fit`.
"""
