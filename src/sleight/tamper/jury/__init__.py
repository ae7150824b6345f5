"""The Sleight of Word jury: its prompt and ballot, its runs, its vote store and the human gold subset."""
