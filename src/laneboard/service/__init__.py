"""Running the supervisor and the server as OS services (systemd, launchd, cron).

``spec`` says what a unit runs (absolute interpreter, explicit PATH, the board, the log,
the environment file), ``render`` turns it into a systemd unit, a launchd plist or a cron
block, the scheduler modules install, remove and inspect them, and ``manager`` ties them
to ``lb supervisor|service enable|disable|status``. ``run`` is the program every unit
starts: it loads the environment file and sends the process's output to its log.
"""
