"""`ji.design`: the next experiment."""
