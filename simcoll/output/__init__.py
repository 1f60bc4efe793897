"""What results look like outside: rows and tables in the nccl-tests convention, plots,
and Chrome/Perfetto traces."""
