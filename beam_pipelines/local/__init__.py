"""Local-runner speed work: the worker server started ahead of the job, the workers it forks, and the libraries local processes leave out."""
