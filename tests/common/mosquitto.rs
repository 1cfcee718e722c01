//! A real mosquitto broker on loopback for the MQTT tests, killed and reaped on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A loopback TCP port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The running broker; dropping it kills and reaps the process on every path, panics
/// included.
pub struct Broker(Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// mosquitto with one anonymous plaintext listener on `127.0.0.1:port`.
pub fn broker(dir: &Path, port: u16) -> Broker {
    broker_with(dir, format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"), &[port])
}

/// mosquitto with the configuration `conf` (written to `dir`), once it listens on every
/// port of `ports`.
pub fn broker_with(dir: &Path, conf: String, ports: &[u16]) -> Broker {
    let path = dir.join("mosquitto.conf");
    std::fs::write(&path, conf).unwrap();
    // mosquitto started as root reads its files as the 'mosquitto' user.
    let _ = Command::new("chmod").args(["-R", "a+rX"]).arg(dir).status();
    let bin = ["/usr/sbin/mosquitto", "/usr/bin/mosquitto"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("mosquitto is installed by scripts/setup.sh");
    let guard =
        Broker(Command::new(bin).arg("-c").arg(&path).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
    for &port in ports {
        let mut up = false;
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                up = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(up, "mosquitto did not listen on {port}");
    }
    guard
}

/// Publishes one MQTT v5 message (QoS 1) with mosquitto_pub.
pub fn publish(port: u16, topic: &str, payload: &str) {
    publish_args(port, topic, payload, &[]);
}

/// [`publish`] with the SCI's proof in the `authorization` user property (seed 004 SCI
/// Authentication over MQTT v5).
pub fn publish_with(port: u16, topic: &str, payload: &str, authorization: &str) {
    publish_args(port, topic, payload, &["-D", "publish", "user-property", "authorization", authorization]);
}

fn publish_args(port: u16, topic: &str, payload: &str, extra: &[&str]) {
    let st = Command::new("mosquitto_pub")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-V", "mqttv5", "-q", "1", "-t", topic, "-m", payload])
        .args(extra)
        .status()
        .expect("mosquitto_pub (mosquitto-clients) is installed by scripts/setup.sh");
    assert!(st.success());
}
