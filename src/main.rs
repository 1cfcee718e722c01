fn main() {
    std::process::exit(cats_sma::config::cli::main());
}
