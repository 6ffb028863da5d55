"""What the library packages for hosts: the platform wheel, the runtime files and the boot scripts."""
