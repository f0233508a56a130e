"""Running across machines: the deployment file, a party's ``serve``, the label holder's run.

See README "Deploy across machines". Needs the ``deploy`` extra (grpcio, cryptography, rbcl, openmined-psi).
"""
