"""Every trainer memdoc reads and writes, one folder each (`trl/`, `hf/`, `axolotl/`, `llamafactory/`,
`deepspeed/`, `accelerate/`), with `registry.TRAINERS` the one list of them and `trainer.Trainer` what each answers.

A folder holds `keys.py` (the key table its reader and writer share: `table.KeyTable`), `read.py` (its files -> a
`reading.ConfigReading`), `write.py` (the plan -> its config: `base.Emitted`) and `facts.py` (packing, CP/TP,
QLoRA's upcast, the loss path). The modules beside the folders are what the trainers share: the reading contract
(`reading.py`, `values.py`, `detect.py`, `fsdp.py`, `precision.py`), the writing ground (`base.py`, `text.py`,
`templates.py`, `vision.py`, `emit.py`, `packing.py`, `parallel.py`, `kbit.py`). Pure mappings, no I/O.
"""
