"""Congestion-control labs: lab folders (handout, starter, solution, scenario and checks)
and the grader that drives a student's code through them.

Who does what:

* ``catalog``: finds the lab folders and reads each ``lab.toml`` (the lab's scenarios
  and checks, as data a teacher edits: points, visibility, tolerances);
* ``student``: loads a student's file or class, with one-line errors that point at
  their line, and bounds the time a check may take;
* ``harness``: a simulated clock that drives a congestion-control class with scripted
  ACK, CNP, INT and timer events (pure, no fabric, no root);
* ``emulation``: runs a lab's scenarios through the ordinary experiment path, measures
  again what the fidelity gate refuses, and says "ungraded" when the machine cannot;
* ``grader``: runs a lab's checks and adds up the points; ``verdict``: the result,
  with Gradescope's ``results.json``;
* ``workspace``: ``emu lab start`` (a student's working folder) and ``emu lab export``
  (the pack a teacher hands out, without solutions).

Each lab folder ``labN_slug/`` holds ``README.md`` (the handout), ``lab.toml``,
``checks.py`` (the check functions ``lab.toml`` names), ``starter/`` and
``solution/``. See docs/labs.md.
"""
