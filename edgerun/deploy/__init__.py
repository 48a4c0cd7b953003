"""Getting bundles onto devices: Linux boards over SSH (:mod:`edgerun.deploy.ssh`) and
microcontrollers over a serial link."""
