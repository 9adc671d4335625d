"""The comparison corpus: real architectures written in PyTorch and MindSpore, noise-only pairs and planted port
bugs, each with what compare-layers, compare-loss and compare-weights must answer at their default options.

It exists so that nobody tunes a threshold to one case: every rule change is judged on the whole table.

Modules (none imports MindSpore or PyTorch at import time; each framework runs in a subprocess of its own):

* ``cnn``, ``transformer``, ``audio``: the architectures (a ResNet-style CNN; a transformer encoder; a Conv1d +
  BatchNorm1d front end with a bidirectional LSTM whose sequence length equals the batch size). Each is a module with
  the same interface, listed in ``architectures.ARCHITECTURES``: ``make_batches(num_steps, batch_size, seed)``,
  ``eval_batch(batch_size)``, ``build_torch(seed)`` (the reference), ``build_mindspore(plants)`` (the port, with the
  planted bugs a case asks for), ``torch_batch(x, y, dtype)`` / ``mindspore_batch(x, y)``, and ``RENAMES`` (the
  attribute renames of a port whose names differ from the reference, or ``()``). A new architecture is one more such
  module and one line there.
* ``plants``: how a case plants a bug (port options read by the builders; weights transposed, swapped or with
  their gate blocks reordered in the converted state).
* ``cases``: every case (the two sides, what is planted, what each tool and the replay must answer).
* ``torch_side``, ``mindspore_side``: run one framework's sides (``python -m corpus.torch_side PLAN``).
* ``port_replay``: in the MindSpore PyNative process, after its sides, the port's layer compare-layers names is run
  on the PyTorch side's captured inputs (``compare_layers(A, B, replay_a=port)``).
* ``runner``: ``generate(root)`` runs every distinct side once and writes one directory per case.
* ``report``: ``report(case_dir)`` calls only the public comparison API with its defaults (and, for the named
  layer, ``replay=True`` and the real replay's result); ``table(rows)`` writes the confusion table;
  ``forward_errors(case_dir)`` gives the normwise relative error of every forward record.
"""
