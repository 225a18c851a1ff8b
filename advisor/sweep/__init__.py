"""``advisor sweep``: the batch size x precision table, every cell run at run time and measured."""
