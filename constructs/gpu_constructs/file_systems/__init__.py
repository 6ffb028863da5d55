"""File systems that GPU jobs and fleets mount: FSx for Lustre (new or imported), EFS, their shared base,
the Lustre facts AWS documents, and the Lustre client side (security group rules, mount on a host)."""
