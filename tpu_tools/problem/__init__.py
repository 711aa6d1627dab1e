"""What is being solved: references and their loading, tasks, input cases, and jaxpr views of a program."""
