"""Tools that read the platform's cloud assembly or its config model; none of them is a stack.

- :mod:`platform_tools.summary`: each stack's resource count, its cost and the cdk-nag verdict (``make synth``).
- :mod:`platform_tools.cost`: always-on $/month per stack and training $/hour from the templates, and the cost
  difference of two assemblies (``gpuctl cost``, ``gpuctl cost diff``).
- :mod:`platform_tools.diagram`: the architecture diagram, ``docs/architecture.png`` (``make diagram``).
- :mod:`platform_tools.config_reference`: ``docs/config-reference.md`` from the config model
  (``make config-reference``).
"""
